"""``scontrol write batch_script JOB [FILE|-]``: a job's batch script, as submitted, to
``slurm-JOB.sh`` (or FILE, replaced if it exists; ``-``: stdout), for its owner or an
administrator. Slurm 22.05.8's words: ``batch script for job N written to
FILE``; an unknown job is ``job script retrieval failed: Invalid job id specified`` on
stderr, with exit code 0, as its scontrol exits."""

from __future__ import annotations

import os

from hal.compat.seam import Console
from hal.core.errors import InvalidRequest, NotFound


def write(args: list[str], console: Console) -> int:
    if not args or args[0].lower() != "batch_script":
        console.err(f"invalid write argument:{args[0] if args else ''}")  # (Slurm's words)
        return 1
    if len(args) < 2:
        raise InvalidRequest("write batch_script needs a job id: scontrol write batch_script JOB")
    job_id, target = args[1], args[2] if len(args) > 2 else f"slurm-{args[1]}.sh"
    try:
        text = console.client.job_script(job_id)
    except NotFound:
        console.err("job script retrieval failed: Invalid job id specified")
        return 0
    if target == "-":
        console.stdout.write(text)
        return 0
    path = os.path.join(console.cwd, target)
    with open(path, "w") as out:
        out.write(text)
    console.out(f"batch script for job {job_id} written to {target}")
    return 0
