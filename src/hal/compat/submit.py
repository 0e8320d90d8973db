"""The ``sbatch`` command: parse, then submit (or test, or submit and wait).

Output strings are Slurm's, because tools match them: Parsl and Nextflow look for
``Submitted batch job <id>``, Snakemake passes ``--parsable`` and reads the bare id.
"""

from __future__ import annotations

import _socket  # (``socket`` itself adds enums and selectors: see hal.client.transport)

from hal.compat.sbatch import (
    HELP,
    SbatchRequest,
    ignored_variables,
    parse_sbatch,
    process_umask,
    script_text,
)
from hal.compat.seam import Console
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError, Unavailable
from hal.slurm.syntax import compress_hostlist

TYPE_CHECKING = False  # (the schemas, ``typing``: not at start-up, see ``hal.compat``)
if TYPE_CHECKING:
    from hal.wire.jobs import JobInfo
    from hal.wire.submit import JobSubmit

WAIT_FIRST_POLL_S = 1.0
WAIT_MAX_POLL_S = 10.0  # a polling loop should stay gentle on the server (squeue.1 warns)


def _stdin_script(console: Console) -> str:
    """The script sbatch reads from stdin, byte for byte where stdin has bytes (a text
    stream would turn ``\r\n`` into ``\n`` and hide DOS line breaks)."""
    raw = getattr(console.stdin, "buffer", None)
    if raw is None:
        return console.stdin.read()
    return script_text(raw.read(), None)


def sbatch(argv: list[str], console: Console) -> int:
    try:
        request = parse_sbatch(
            argv,
            environ=console.environ,
            cwd=console.cwd,
            read_stdin=lambda: _stdin_script(console),
            now=console.clock(),
            hostname=_socket.gethostname(),
            umask=process_umask(),
        )
    except HalError as err:
        return console.error(err.message)
    if request.help:
        console.stdout.write(HELP)
        return 0
    if request.version:
        console.out(VERSION_LINE)
        return 0
    for var in ignored_variables(console.environ):
        console.err(f"sbatch: warning: {var} is not supported by HAL: ignored")
    if not request.quiet:  # (Slurm prints these through info(), which -Q silences)
        for warning in request.warnings:
            console.err(f"sbatch: {warning}")
    if request.verbose:
        _describe(request, console)
    try:
        if request.components:
            return _submit_het(request, console)
        if request.test_only:
            return _test_only(request.job, console)
        answer = console.client.submit_fields(request.body)
    except HalError as err:
        return console.error(f"Batch job submission failed: {err.message}")
    job_id, task_ids = int(answer["job_id"]), [int(i) for i in answer.get("task_ids", ())]
    _announce(request, job_id, console)
    if not request.wait:
        return 0
    console.stdout.flush()  # a tool reading our pipe gets the id before we block
    try:
        return _wait(job_id, task_ids, console)
    except HalError as err:
        return console.error(f"while waiting for job {job_id}: {err.message}")


def _submit_het(request: SbatchRequest, console: Console) -> int:
    """A heterogeneous job: one submission of every component; Slurm prints the het
    job id (component 0's) alone."""
    if request.test_only:
        from hal.compat.formats import timestamp

        # Slurm prints one line per component, all with the same start
        for job, will in zip(
            request.components, console.client.test_only_het(list(request.components)), strict=True
        ):
            tasks = job.ntasks or job.nodes_min * (job.ntasks_per_node or 1)
            console.err(
                f"sbatch: Job {will.job_id or 0} to start at {timestamp(will.expected_start)} "
                f"using {tasks * job.cpus_per_task} processors on nodes "
                f"{compress_hostlist(will.nodes)} in partition {will.partition}"
            )
        return 0
    ids = console.client.submit_het(list(request.components))
    _announce(request, ids[0], console)
    if not request.wait:
        return 0
    console.stdout.flush()
    try:
        return _wait(ids[0], [], console)
    except HalError as err:
        return console.error(f"while waiting for job {ids[0]}: {err.message}")


def _announce(request: SbatchRequest, job_id: int, console: Console) -> None:
    """The line tools read the id from. ``-Q`` drops Slurm's informational "Submitted
    batch job" line; an id asked for with ``--parsable`` is still printed."""
    if request.parsable:
        console.out(str(job_id))
    elif not request.quiet:
        console.out(f"Submitted batch job {job_id}")


def _describe(request: SbatchRequest, console: Console) -> None:
    from hal.wire.submit import non_defaults

    console.err("sbatch: defined options")
    shown = non_defaults(request.job, exclude=("script", "environment"))
    for key, value in shown.items():
        console.err(f"sbatch: {key:<20}: {value}")
    if request.job.environment:
        console.err(f"sbatch: {'environment':<20}: {len(request.job.environment)} variables")


def _test_only(job: JobSubmit, console: Console) -> int:
    from hal.compat.formats import timestamp  # (not at start-up: sbatch seldom prints a time)

    will = console.client.test_only(job)
    tasks = job.ntasks or job.nodes_min * (job.ntasks_per_node or 1)
    processors = tasks * job.cpus_per_task
    # Slurm prints this line on stderr (through info()), not stdout.
    console.err(
        f"sbatch: Job {will.job_id or 0} to start at {timestamp(will.expected_start)} using "
        f"{processors} processors on nodes {compress_hostlist(will.nodes)} in partition "
        f"{will.partition}"
    )
    return 0


def _wait(job_id: int, task_ids: list[int], console: Console) -> int:
    """Poll until the job (or every element ``task_ids`` of the array) has ended; return
    Slurm's exit code for ``--wait``: the job's exit code, 1 if a signal ended it, the
    highest over an array."""
    delay = WAIT_FIRST_POLL_S
    while True:
        try:
            jobs = _poll(job_id, task_ids, console)
        except Unavailable as err:
            # the server restarting, or its database away: the job goes on, and so does
            # the wait (Slurm's sbatch retries until its controller answers again)
            console.err(
                "sbatch: error: Currently unable to load job state information, retrying: "
                + err.message
            )
            jobs = []
        if jobs and all(_finished(job) for job in jobs):
            return max(1 if job.exit_signal else job.exit_code for job in jobs)
        console.sleep(delay)
        delay = min(delay * 2, WAIT_MAX_POLL_S)


def _poll(job_id: int, task_ids: list[int], console: Console) -> list[JobInfo]:
    if not task_ids:
        return [console.client.job(job_id)]
    jobs = console.client.jobs(ids=[str(job_id)], include_finished=True)
    if len(jobs) < len(task_ids):
        return []  # an element is missing from the listing: keep waiting
    return jobs


def _finished(job: JobInfo) -> bool:
    from hal.core.states import JobState

    try:
        return JobState(job.state).is_terminal
    except ValueError:
        return False
