"""The ``sbcast`` command: copy a file to the same path on every node of a job, as
Slurm's sbcast does from a batch script (``sbcast ./app /tmp/app; srun /tmp/app``), so
that the job's tasks read it from local disk instead of a shared filesystem.

HAL sends it the way srun sends its input (ADR 0012, "srun's input"): sbcast opens a
step of the job with one task per node (``--overlap``: it holds none of the job's CPUs or
memory), relays the file to every task as their stdin, and each task, running as the
job's user on its node, writes it next to the destination and renames it into place
with the source's mode (``-p``: and its modification time). So the copy is the user's,
made with the user's rights, and a half-written file is never seen at the destination.

Slurm 22.05.8's messages and exit codes (docs/slurm-checks.md, "sbcast"): an existing
destination without ``-f`` is ``REQUEST_FILE_BCAST(node): File exists`` (17), a missing
folder ``No such file or directory`` (2), a destination ending in ``/`` is refused, a
source that cannot be read exits 255. Unlike Slurm's, the copy shows in sacct as a step
named ``sbcast``. ``-C``, ``-F``, ``-s`` and ``-t`` tune how Slurm's sbcast sends
(compression, fan-out, block size, timeout) and are taken without effect.
"""

from __future__ import annotations

import base64
import os
import shlex

from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.compat.srun_input import InputSender
from hal.compat.steps import step_pages
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError

OPTIONS = (
    Opt("force", ("force",), "f", Arg.NONE),
    Opt("preserve", ("preserve",), "p", Arg.NONE),
    Opt("jobid", ("jobid",), "j"),
    Opt("compress", ("compress",), "C", Arg.OPTIONAL),
    Opt("fanout", ("fanout",), "F"),
    Opt("size", ("size",), "s"),
    Opt("timeout", ("timeout",), "t"),
    Opt("verbose", ("verbose",), "v", Arg.NONE),
    Opt("help", ("help",), "h", Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)
USAGE = "Usage: sbcast [-CfFjpstvV] SOURCE DEST"
TRY_HELP = 'Try "sbcast --help" for more information'
NO_JOB = (
    "Need a job id to run this command.  Run from within a Slurm job or use the --jobid option."
)
# what each node's task runs: $1 the destination, $2 its mode (octal), $3 1 to replace
# it, $4 its modification time ("" to leave it); srun's input is the file
WRITE = r"""
dest=$1; node=${SLURMD_NODENAME:-$(hostname)}
say() { echo "sbcast: error: REQUEST_FILE_BCAST($node): $1" >&2; exit "$2"; }
[ -d "$(dirname -- "$dest")" ] || say "No such file or directory" 2
[ -d "$dest" ] && say "Is a directory" 21
[ -e "$dest" ] && [ "$3" != 1 ] && say "File exists" 17
part="$dest.sbcast.$$"
cat > "$part" 2>/dev/null || { rm -f -- "$part"; say "Permission denied" 13; }
chmod "$2" "$part" && { [ -z "$4" ] || touch -m -d "@$4" "$part"; } && mv -f -- "$part" "$dest"
"""


def sbcast(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        console.error(err.for_command("sbcast"))
        console.err(TRY_HELP)
        return 1
    given = {dest: value for dest, value, _ in parsed.values}
    if "help" in given or "usage" in given:
        console.out(USAGE)
        return 0
    if "version" in given:
        console.out(VERSION_LINE)
        return 0
    names = list(parsed.positionals)
    if len(names) != 2:
        console.error(f"Need two file names, have {len(names)} names")
        console.err(TRY_HELP)
        return 1
    source, dest = names
    if dest.endswith("/"):
        return console.error("Target filename cannot be a directory.")
    job_text = given.get("jobid") or console.environ.get("SLURM_JOB_ID", "")
    if not job_text:
        return console.error(NO_JOB)
    try:
        job_id = int(job_text.split(".")[0])
    except ValueError:
        return console.error(f"Invalid job id {job_text}")
    try:
        fd = os.open(os.path.join(console.cwd, source), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        console.error(f"Can't open `{source}`: {err.strerror}")
        return 255
    try:
        return _broadcast(job_id, fd, dest, "preserve" in given, "force" in given, console)
    except HalError as err:
        return console.error(err.message)
    finally:
        os.close(fd)


def _broadcast(job_id: int, fd: int, dest: str, keep: bool, force: bool, console: Console) -> int:
    from hal.wire.steps import StepCreate

    info = os.fstat(fd)
    mode = f"{info.st_mode & 0o7777:o}"
    mtime = str(int(info.st_mtime)) if keep else ""
    client = console.client
    job = client.job(job_id)
    argv = ["sh", "-c", WRITE, "sbcast", dest, mode, "1" if force else "0", mtime]
    body = StepCreate(
        argv=argv,
        nodes=len(job.nodes) or None,
        ntasks_per_node=1,
        name="sbcast",
        workdir=console.cwd,
        environment={"PATH": console.environ.get("PATH", "/usr/bin:/bin")},
        only_environment=True,
        overlap=True,
        relay_input=True,
    )
    step = client.create_step(job_id, body)
    sender = InputSender(job_id, step.step_id, console, console.client_factory, fd=fd)
    sender.start()
    try:
        for page in step_pages(job_id, step.step_id, console, lambda _why: None):
            for chunk in page.chunks:
                if chunk.stream == "stderr":
                    _say(console, base64.b64decode(chunk.data_b64))
    finally:
        sender.stop()
    if page.exit_code and page.exit_code not in (2, 13, 17, 21):  # (not the task's words)
        console.error(
            f"cannot write {shlex.quote(dest)} on the job's nodes (exit code {page.exit_code})"
        )
    return page.exit_code


def _say(console: Console, data: bytes) -> None:
    """The tasks' lines: sbcast's own, not srun's (which name a task's exit code)."""
    for line in data.decode(errors="replace").splitlines():
        if line and not line.startswith("srun: "):
            console.err(line)
