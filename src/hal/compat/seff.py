"""The ``seff`` command: how well a job used what it was given.

Slurm ships ``seff`` in its contribs (a Perl script over ``sacct``); sites install it and
users run ``seff JOBID`` after a job to size the next one. HAL prints the same report from
its own history: CPU time used against the CPUs held for the job's run time, and the
batch step's peak memory (measured by the agent when the job ends) against the memory
requested. A job that has not ended is reported with seff's warning; a pending one has
no figures yet.
"""

from __future__ import annotations

import grp
import math
import pwd
import re

from hal.compat.formats import duration_long
from hal.compat.job_fields import time_used, total_cpu_seconds
from hal.compat.seam import Console
from hal.core.errors import HalError, NotFound

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.jobs import JobInfo

USAGE = "Usage: seff [Options] <Jobid>\n       Options:\n       -h    Help menu"
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")  # 123 or an array element 123_4


def seff(argv: list[str], console: Console) -> int:
    if not argv or any(a in ("-h", "--help") for a in argv):
        console.out(USAGE)
        return 0 if argv else 1
    ident = argv[-1]
    if len(argv) > 1 or not _JOB_ID.match(ident):
        return console.error(f"{ident!r} is not a job id; write 123 or 123_4 (an array element)")
    try:
        job = console.client.job(ident, validate=False)
        cluster = console.client.cluster_config(validate=False).cluster_name
    except NotFound:
        return console.error(f"Job not found: {ident}")
    except HalError as err:
        return console.error(err.message)
    for line in report(job, cluster, console.clock()):
        console.out(line)
    return 0


def report(job: JobInfo, cluster: str, now: float) -> list[str]:
    """seff's lines for ``job``."""
    lines = [f"Job ID: {job.id}"]
    if job.array_job_id is not None:
        lines.append(f"Array Job ID: {job.display_id}")
    lines += [
        f"Cluster: {cluster}",
        f"User/Group: {job.user}/{_group(job.user)}",
        f"State: {job.state} (exit code {job.exit_code})",
    ]
    nodes = max(job.node_count, 1)
    if job.cpus == 1:
        lines.append("Cores: 1")
    else:
        lines += [f"Nodes: {nodes}", f"Cores per node: {job.cpus // nodes}"]
    if job.start_time is None:
        lines.append(f"Efficiency not available for jobs in the {job.state} state.")
        return lines
    wall = time_used(job, now)
    core_wall = wall * job.cpus
    cpu = total_cpu_seconds(job)
    lines += [
        f"CPU Utilized: {duration_long(cpu)}",
        f"CPU Efficiency: {_percent(cpu, core_wall)} of {duration_long(core_wall)} core-walltime",
        f"Job Wall-clock time: {duration_long(wall)}",
        f"Memory Utilized: {_size(job.max_rss_bytes)}",
    ]
    if job.memory_bytes:
        per_node = f" ({_size(job.memory_bytes // nodes)}/node)" if nodes > 1 else ""
        lines.append(
            f"Memory Efficiency: {_percent(job.max_rss_bytes, job.memory_bytes)} of "
            f"{_size(job.memory_bytes)}{per_node}"
        )
    else:  # no --mem: the job could use the whole node, there is no request to compare
        lines.append("Memory Efficiency: not available (the job requested no memory limit)")
    if job.end_time is None:
        lines.append("WARNING: Efficiency statistics may be misleading for RUNNING jobs.")
    return lines


def _percent(used: float, held: float) -> str:
    return f"{100.0 * used / held:.2f}%" if held > 0 else "0.00%"


def _size(size_bytes: int) -> str:
    """seff's ``kbytes2str``: ``0.00 MB``, ``512.00 KB``, ``1.46 MB``, ``7.81 GB``."""
    kib = size_bytes / 1024
    if kib <= 0:
        return "0.00 MB"
    exponent = min(int(math.log(kib, 1024)), 5) if kib >= 1 else 0
    return f"{kib / 1024**exponent:.2f} {'KMGTPE'[exponent]}B"


def _group(user: str) -> str:
    """The user's primary group on this host (seff prints the job's); N/A if unknown."""
    try:
        return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except (KeyError, OverflowError):
        return "N/A"
