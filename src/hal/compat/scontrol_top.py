"""``scontrol top JOB[,JOB...]``: the jobs listed first among their owner's pending jobs
(``hal.state.job_top``), with Slurm 22.05.8's lines: silent on success; a refusal is
Slurm's reason ``for job LIST``, rc 1."""

from __future__ import annotations

from hal.compat.seam import Console
from hal.core.errors import Conflict, NotFound, PermissionDenied

REASONS = {NotFound: "Invalid job id specified", PermissionDenied: "Access/permission denied"}


def top(args: list[str], console: Console) -> int:
    if not args:
        console.err("too few arguments for keyword:top")
        return 1
    if len(args) > 1:
        console.err("too many arguments for keyword:top")
        return 1
    listed = args[0]
    try:
        console.client.top(listed)
    except (NotFound, PermissionDenied, Conflict) as err:
        # the server's message starts with Slurm's reason, then says why
        reason = REASONS.get(type(err)) or err.message.split(":", 1)[0]
        console.err(f"{reason} for job {listed}")
        return 1
    return 0
