"""``srun``'s job steps across the job's nodes (ADR 0012): create the step through the
control plane, write its tasks' output as it comes, forward signals, return its exit code.

The output is read by long poll (``GET /v1/jobs/{id}/steps/{n}/output``); with ``-l``
each line is prefixed with its task's rank (``3: ...``), lines of one task kept whole.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from hal.compat.exports import exports_all
from hal.compat.seam import Client, Console
from hal.compat.srun_input import InputSender, input_target, relays_stdin
from hal.compat.srun_output import TaskFiles, job_node_index, node_of_rank, step_input
from hal.compat.srun_pty import following_size, raw_terminal, terminal_size, wants_terminal
from hal.core.errors import HalError, InvalidRequest, NotFound, PermissionDenied, Unavailable
from hal.host.process import start_ticks
from hal.slurm.job_variables import describes_a_job
from hal.slurm.steps import (
    BUSY,
    FORCING_TERMINATION,
    StepRequest,
    force_terminated,
    step_aborted,
)
from hal.slurm.syntax import compress_indices

if TYPE_CHECKING:
    from hal.compat.srun import Invocation
    from hal.wire.steps import StepOutputPage

T = TypeVar("T")
DEFAULT_KILL_WAIT = 30  # Slurm's KillWait, where the server cannot say its own
POLL_WAIT_SECONDS = 10.0  # the server holds a read this long when there is nothing new
AWAY_RETRY_SECONDS = 1.0  # between polls while the server does not answer
# a step waiting for CPUs or GPUs its job's other steps hold asks again after 1, 2, 4, 8, 8... s
BUSY_RETRY_SECONDS = 1.0
BUSY_RETRY_MAX_SECONDS = 8.0
# signals srun passes on to its tasks, local or a step's (Slurm's srun forwards these)
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)
# srun's own lines, which the agents add to a task's error output: never labelled (-l),
# as Slurm's srun prints them itself (srun: error: n1: task 0: Exited with exit code 7)
SRUN_SAYS = b"srun: "
GOT_SIGCONT = "srun: got SIGCONT"  # Slurm's srun says so at each SIGCONT (a job ending too)


class OutputWriter:
    """The tasks' bytes to srun's stdout/stderr; with ``label``, whole lines, each
    prefixed with its rank; with ``files`` (srun -o/-e), to each task's file, ``place``
    naming its node and the node's index in the job."""

    def __init__(
        self,
        console: Console,
        label: bool,
        files: TaskFiles | None = None,
        place: Callable[[int], tuple[str, int]] | None = None,
        raw: bool = False,
    ) -> None:
        self.console = console
        self.label = label
        self.raw = raw  # srun's terminal is raw (--pty): lines its stderr gets end CR LF
        self.files = files
        self.place = place or (lambda rank: ("", 0))
        self.partial: dict[tuple[int, str], bytes] = {}

    def write(self, rank: int, stream: str, data: bytes) -> None:
        if self.files is not None:
            fd = self.files.fd(rank, stream, *self.place(rank))
            if fd is not None:
                os.write(fd, data)
                return
        if self.label:
            data = self.partial.pop((rank, stream), b"") + data
            whole, newline, rest = data.rpartition(b"\n")
            if rest:
                self.partial[(rank, stream)] = rest
            if not newline:
                return
            prefix = f"{rank}: ".encode()
            data = b"".join(
                (b"" if stream == "stderr" and line.startswith(SRUN_SAYS) else prefix)
                + line
                + b"\n"
                for line in whole.split(b"\n")
            )
        self._emit(stream, data)

    def close(self) -> None:
        for rank, stream in list(self.partial):
            self.flush(rank, stream)

    def flush(self, rank: int, stream: str) -> None:
        """The last line of a task's stream, without its newline (-l: labelled all the
        same)."""
        rest = self.partial.pop((rank, stream), None)
        if rest:
            self._emit(stream, f"{rank}: ".encode() + rest + b"\n")

    def _emit(self, stream: str, data: bytes) -> None:
        if self.raw and stream == "stderr":  # (the agents' and srun's lines, not a terminal's)
            data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        text = self.console.stdout if stream == "stdout" else self.console.stderr
        text.flush()
        raw: BinaryIO | None = getattr(text, "buffer", None)
        if raw is not None:
            raw.write(data)
            raw.flush()
        else:
            text.write(data.decode(errors="replace"))


class CtrlC:
    """srun's SIGINT, as Slurm 22.05.8's: the first only says which tasks run
    (``srun: interrupt (one more within 1 sec to abort)``, ``srun: StepId=J.S task 0:
    running``); a second within a second goes on to the tasks, with srun's lines for a
    step being ended. HAL passed the first on: a Ctrl-C to see how a step did ended it."""

    def __init__(self, console: Console, step: str, kill_wait: Callable[[], int]) -> None:
        # ``kill_wait``: the cluster's KillWait, asked only for a second Ctrl-C's line
        # (asking at every start cost srun ~0.1 s); never with the client a signal may
        # have interrupted mid-request
        self.console, self.step, self.kill_wait = console, step, kill_wait
        self.last = -1e9

    def passes_on(self, running: Sequence[int]) -> bool:
        now = time.monotonic()
        if now - self.last > 1.0:
            self.last = now
            self.console.err("srun: interrupt (one more within 1 sec to abort)")
            if running:
                tasks = f"task{'s' if len(running) > 1 else ''} {compress_indices(list(running))}"
                self.console.err(f"srun: StepId={self.step} {tasks}: running")
            return False
        self.console.err(f"srun: sending Ctrl-C to StepId={self.step}")
        self.console.err(FORCING_TERMINATION)
        self.console.err(step_aborted(self.kill_wait()))
        return True


def kill_wait(console: Console) -> int:
    """The cluster's KillWait: how long a step's tasks have between SIGTERM and SIGKILL."""
    try:
        return console.client.cluster_config().kill_wait_seconds
    except HalError:
        return DEFAULT_KILL_WAIT


def run_in_job(job_id: int, call: Invocation, console: Console) -> int:
    """``srun --jobid=N`` from outside job N: a step of N, laid out within its
    allocation, as srun under salloc runs one. srun's environment goes without what
    describes another job (the agent sets N's). A job not running, not found or another
    user's is refused with Slurm's "Unable to confirm allocation" line."""
    from hal.core.states import JobState

    def unconfirmed(reason: str) -> int:
        return console.error(f"Unable to confirm allocation for job {job_id}: {reason}")

    try:
        job = console.client.job(job_id)
    except NotFound:
        return unconfirmed("Invalid job id specified")
    except PermissionDenied:
        return unconfirmed("Access/permission denied")
    except HalError as err:
        return unconfirmed(err.message)
    if job.state != JobState.RUNNING.value:
        ended = "it has ended" if JobState(job.state).is_terminal else "wait until it runs"
        return unconfirmed(
            f"job {job_id} is {job.state}, not running; srun --jobid runs steps in a "
            f"running job only ({ended}: squeue -j {job_id})"
        )
    environment = {k: v for k, v in console.environ.items() if not describes_a_job(k)}
    # as Slurm's srun outside the job's environment: its -J, else its command's name
    environment["SLURM_JOB_NAME"] = call.step_name
    request = call.within(len(job.nodes))
    return run_step(job_id, request, call, console, environment=environment, confirm=True)


def step_pages(
    job_id: int, step_id: int, console: Console, away: Callable[[str], None]
) -> Iterator[StepOutputPage]:
    """The step's output pages, by long poll, until it has ended and all its output is
    in (the last page). While the control plane is away the step goes on (its tasks
    outlive the server, which takes it up again), as sbatch --wait: ``away`` is told why
    once per outage, and the poll goes on once the server answers."""
    after = 0
    gone = False
    while True:
        try:
            page = console.client.step_output(job_id, step_id, after=after, wait=POLL_WAIT_SECONDS)
        except Unavailable as err:
            if not gone:
                away(err.message)
            gone = True
            console.sleep(AWAY_RETRY_SECONDS)
            continue
        gone = False
        yield page
        after = page.cursor
        if page.state != "RUNNING" and not page.chunks:
            return


def once_free(job_id: int, console: Console, create: Callable[[], T]) -> T:
    """What ``create`` (a step's creation) gives, once the job's CPUs and GPUs the step
    asks for are free: while its other steps hold them, srun waits and asks again, saying
    so as Slurm 22.05.8's srun does (docs/slurm-checks.md). Steps held by an srun that is
    gone from this node are ended first (``release_abandoned``)."""
    pause = BUSY_RETRY_SECONDS
    waited = False
    while True:
        try:
            step = create()
        except HalError as err:
            if err.field != BUSY:
                raise
            if release_abandoned(job_id, console):
                continue
            how = "still" if waited else "temporarily"
            console.err(
                f"srun: Job {job_id} step creation {how} disabled, retrying "
                "(Requested nodes are busy)"
            )
            waited = True
            time.sleep(pause)
            pause = min(pause * 2, BUSY_RETRY_MAX_SECONDS)
            continue
        if waited:
            console.err(f"srun: Step created for job {job_id}")
        return step


def srun_identity(pid: int) -> str:
    """``PID:START`` of a process of this node (its start in clock ticks after boot), ""
    when it is gone: a PID the kernel gives again later has another start."""
    ticks = start_ticks(pid)
    return "" if ticks is None else f"{pid}:{ticks}"


def release_abandoned(job_id: int, console: Console) -> bool:
    """Ends the job's steps that an srun of this node ran and that it never reported
    ended because it is gone (killed with SIGKILL): they would hold the job's CPUs until
    the job ended. Whether any was ended."""
    here = console.environ.get("SLURMD_NODENAME", "")
    try:
        steps = console.client.job_steps(job_id) if here else []
    except HalError:
        return False
    freed = False
    for step in steps:
        if not (step.local and step.srun and step.nodes == [here]):
            continue
        pid = step.srun.partition(":")[0]
        if not pid.isdigit() or srun_identity(int(pid)) == step.srun:
            continue  # (still there)
        try:
            console.client.end_local_step(
                job_id, step.step_id, exit_code=128 + signal.SIGKILL, exit_signal=signal.SIGKILL
            )
        except HalError:
            continue
        console.err(
            f"srun: warning: step {job_id}.{step.step_id} ended: its srun (pid {pid}) is "
            "gone, so the job's CPUs and memory it held are free"
        )
        freed = True
    return freed


def run_step(
    job_id: int,
    request: StepRequest,
    call: Invocation,
    console: Console,
    *,
    environment: dict[str, str] | None = None,
    confirm: bool = False,
) -> int:
    """The step, its output relayed and srun's signals forwarded; its exit code.
    ``environment``: the tasks' (default srun's own); ``confirm``: a refusal of the
    caller (not the job's owner) reads as srun --jobid's."""
    from hal.wire.steps import MultiProgFile, StepCreate

    programs = call.programs
    try:
        stdin = step_input(call.input, console.environ, console.cwd)
    except InvalidRequest as err:
        return console.error(err.message)
    relay, input_rank = input_target(call.input)
    relay = relay and relays_stdin()  # (/dev/null, a closed stdin: the tasks read /dev/null)
    pty = wants_terminal(call.pty)
    tasks_env = dict(console.environ if environment is None else environment)
    size = terminal_size() if pty else None
    if size is not None:  # (task 0 alone reads srun's input, in its terminal)
        relay, input_rank = True, 0
        tasks_env.update(SLURM_PTY_WIN_ROW=str(size[0]), SLURM_PTY_WIN_COL=str(size[1]))
    body = StepCreate(
        argv=call.command,
        nodes=request.nodes,
        ntasks=request.ntasks,
        ntasks_per_node=request.ntasks_per_node,
        nodelist=list(request.nodelist),
        name=call.step_name,
        workdir=console.cwd,
        environment=tasks_env,
        only_environment=call.export is not None and not exports_all(call.export),
        distribution=request.distribution.spec,
        multi_prog=None
        if programs is None
        else MultiProgFile(name=programs.name, text=programs.text),
        gpus=request.gpus,
        gpus_per_node=request.gpus_per_node,
        gpus_per_task=request.gpus_per_task,
        cpus_per_task=request.cpus_per_task,
        exact=request.exact,
        overlap=request.overlap,
        mem_per_node=request.mem_per_node,
        mem_per_cpu=request.mem_per_cpu,
        time_limit_seconds=request.time_limit_s,
        kill_on_bad_exit=call.kill_on_bad_exit,
        input=stdin,
        relay_input=relay,
        input_rank=input_rank if relay else None,
        pty=None if size is None else list(size),
    )
    try:
        step = once_free(job_id, console, lambda: console.client.create_step(job_id, body))
    except PermissionDenied as err:
        if confirm:
            return console.error(
                f"Unable to confirm allocation for job {job_id}: Access/permission denied"
            )
        return console.error(err.message)
    except HalError as err:
        return console.error(err.message)
    signaller: list[Client] = []  # its own connection: the main one waits in a read

    waits = [30]  # KillWait, as each output page says it (srun polls them)
    ctrl_c = CtrlC(console, f"{job_id}.{step.step_id}", lambda: waits[0])

    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGCONT:
            console.err(GOT_SIGCONT)
        if signum == signal.SIGINT and not ctrl_c.passes_on(range(sum(step.tasks))):
            return
        if not signaller:
            signaller.append(console.client_factory())
        try:
            signaller[0].signal_step(job_id, step.step_id, signum)
        except HalError as err:
            console.err(f"srun: error: cannot forward signal {signum}: {err.message}")

    files = None
    if call.files is not None:
        env = console.environ
        files = call.files.files(env, console.cwd, step.step_id, "")

    def place(rank: int) -> tuple[str, int]:
        node, _ = node_of_rank(step.nodes, step.tasks, rank)
        return node, job_node_index(env, node)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    terminal = contextlib.ExitStack()
    if pty:  # every key to task 0's terminal, as bytes, until the step ends
        terminal.enter_context(following_size(job_id, step.step_id, console))
        terminal.enter_context(raw_terminal())
    sender = None
    if relay:  # srun's stdin to the tasks, beside the output relay (its own thread)
        sender = InputSender(job_id, step.step_id, console, console.client_factory)
        sender.start()
    writer = OutputWriter(console, call.label, files, place, raw=pty)
    aborted = False  # scancel ended the step: said once

    def say(line: str) -> None:
        console.err(f"{line}\r" if pty else line)  # (a raw terminal's lines end CR LF)

    def away(why: str) -> None:
        where = f"{job_id}.{step.step_id}"
        say(f"srun: the control plane is away ({why}); still following step {where}")

    try:
        for page in step_pages(job_id, step.step_id, console, away):
            waits[0] = page.kill_wait_seconds
            if page.cancelled_at is not None and not aborted:  # scancel JOB.STEP
                aborted = True
                if not page.bad_exit:  # (srun -K's lines are in the output: the agent's)
                    say(step_aborted(page.kill_wait_seconds))
                if page.job_cancelled:
                    say(FORCING_TERMINATION)
            try:
                for chunk in page.chunks:
                    if pty and chunk.rank != 0:
                        continue  # (Slurm's: the other tasks' output goes to /dev/null)
                    writer.write(chunk.rank, chunk.stream, base64.b64decode(chunk.data_b64))
            except InvalidRequest as err:  # an output file that cannot be opened
                console.error(err.message)
                writer.files = None  # (said once; the rest goes to srun's own output)
    except HalError as err:
        return console.error(f"lost step {job_id}.{step.step_id}: {err.message}")
    finally:
        terminal.close()
        if sender is not None:
            sender.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for client in signaller:
            client.close()
        if files is not None:
            files.close()
    writer.close()
    if page.dropped_bytes:
        console.err(
            f"srun: warning: {page.dropped_bytes} bytes of the step's output were dropped "
            "unread (the server keeps 16 MiB per step)"
        )
    if page.bad_exit:  # srun -K: a task's failure ended the others (Slurm 22.05.8's line)
        console.err(force_terminated(f"{job_id}.{step.step_id}"))
    return page.exit_code
