"""Job steps' events and commands (ADR 0012): the step half of the state machine's
vocabulary (``events``), keyed by ``StepKey`` (job, its run, step).

Per step part, the events in the order they come::

    StepLaunchRequested ─▶ StepStarted | StepLaunchFailed          (or StepAdopted)
       StepTasksFound, StepOutputRead*, StepFedRead*, StepTasksEnded*, StepOverMemory,
       StepSignalRequested*, StepInputArrived*
    StepKeeperExited ─▶ StepCollected ─▶ StepsDelivered (its end answered: ForgetStep)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hal.agent.records import StepKey
from hal.wire.agent import (
    StepBadExit,
    StepEnd,
    StepInput,
    StepInputFed,
    StepLaunch,
    StepOutput,
    StepSignal,
)
from hal.wire.steps import TaskTotals

# --- events ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepLaunchRequested:
    launch: StepLaunch
    time: float


@dataclass(frozen=True, slots=True)
class StepSignalRequested:
    """``StepSignal`` came. ``tasks_gone``: the parts of its job whose tasks the shell
    knows and found all ended, looked at when it names a cancel (slurmstepd's line is
    written only where tasks still run: a restarted server repeats a scancel's kill)."""

    request: StepSignal
    time: float
    tasks_gone: frozenset[StepKey] = frozenset()


@dataclass(frozen=True, slots=True)
class StepInputArrived:
    request: StepInput
    time: float


@dataclass(frozen=True, slots=True)
class StepAdopted:
    """A step part an earlier agent started, found in its folder: when its keeper was
    started (its ``launch.json``), when its own time limit came (its ``timed-out``
    file; None: not yet), and the srun -K failure that agent said."""

    launch: StepLaunch
    began: float
    timed_out_at: float | None
    failed: tuple[int, int] | None
    time: float


@dataclass(frozen=True, slots=True)
class StepStarted:
    """The launcher recorded the part's keeper and let it go."""

    key: StepKey
    time: float


@dataclass(frozen=True, slots=True)
class StepLaunchFailed:
    """The part's keeper could not be started; ``reason`` goes in srun's error line."""

    key: StepKey
    reason: str
    time: float


@dataclass(frozen=True, slots=True)
class StepTasksFound:
    """The keeper recorded its tasks (the shell now knows their pids)."""

    key: StepKey
    time: float


@dataclass(frozen=True, slots=True)
class StepOutputRead:
    """What a task's output file gained, read from ``offset`` (``StepState.read_offset``)."""

    key: StepKey
    rank: int
    stream: str
    offset: int
    data: bytes
    time: float


@dataclass(frozen=True, slots=True)
class StepFedRead:
    """How far each task got with srun's relayed input (rank, offset; -1: no more)."""

    key: StepKey
    fed: tuple[tuple[int, int], ...]
    time: float


@dataclass(frozen=True, slots=True)
class StepTasksEnded:
    """srun -K: the tasks that ended so far, (rank, exit code; -N: signal N) in order."""

    key: StepKey
    ends: tuple[tuple[int, int], ...]
    time: float


@dataclass(frozen=True, slots=True)
class StepOverMemory:
    """rlimit backend: the part's tasks use more than its job's memory on this node."""

    key: StepKey
    time: float


@dataclass(frozen=True, slots=True)
class StepKeeperExited:
    """The keeper is gone. ``codes``: each task's end from its ``status.json`` (None: it
    wrote none: killed outright, or, not ``recorded``, never started); ``ends``: srun -K's
    ends as they came (read for a part that still awaits a failure)."""

    key: StepKey
    codes: tuple[tuple[int, int], ...] | None
    recorded: bool
    ends: tuple[tuple[int, int], ...]
    time: float


@dataclass(frozen=True, slots=True)
class StepCollected:
    """The part's cgroup was read and removed (nothing to read without one): its OOM
    kills; and what each task used (``StepShell.totals``)."""

    key: StepKey
    oom: bool
    oom_kills: int
    totals: tuple[TaskTotals, ...]
    time: float


@dataclass(frozen=True, slots=True)
class StepOutgoing:
    """What one sync carries of the steps (``StepState.outgoing``), and what its answer
    lets go of."""

    output: list[StepOutput]
    ends: list[StepEnd]
    upto: dict[tuple[StepKey, int, str], int]  # (step, rank, stream) → end offset
    bad_exits: list[StepBadExit] = field(default_factory=list)  # srun -K's failures
    fed: dict[tuple[StepKey, int], int] = field(default_factory=dict)  # (step, rank) → told
    input_fed: list[StepInputFed] = field(default_factory=list)  # ``fed``, as sent


@dataclass(frozen=True, slots=True)
class StepsDelivered:
    """A sync carrying ``sent`` was answered: the server has it."""

    sent: StepOutgoing
    time: float


# --- commands ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartStep:
    """Start the part's keeper: its environment, artifacts, cgroup and folder, then the
    launcher's fork; ``StepStarted`` or ``StepLaunchFailed`` follows."""

    launch: StepLaunch


@dataclass(frozen=True, slots=True)
class SignalStep:
    """Signal the part's live tasks: each one's process group, and what left it (its
    session, its ``HAL_JOB_MARKER``)."""

    key: StepKey
    signum: int


@dataclass(frozen=True, slots=True)
class SignalLocalStep:
    """A step srun runs on the batch node (``StepSignal.local``): its cgroup's processes,
    else srun itself."""

    request: StepSignal


@dataclass(frozen=True, slots=True)
class WriteStepError:
    """Append the agent's ``text`` (srun's and slurmstepd's lines) to task ``rank``'s
    error output, and read it back as the task's output is."""

    key: StepKey
    rank: int
    text: str


@dataclass(frozen=True, slots=True)
class WriteStepInput:
    """srun's stdin for the part's tasks: into its folder's input file."""

    key: StepKey
    request: StepInput


@dataclass(frozen=True, slots=True)
class MarkStepStopped:
    """The ``stopped`` file in the part's folder (or none): a task its keeper starts
    while its job is suspended stops itself at once."""

    key: StepKey
    stopped: bool


@dataclass(frozen=True, slots=True)
class MarkStepTimedOut:
    """The ``timed-out`` file: its time limit came now (a restarted agent only waits for
    the SIGKILL then)."""

    key: StepKey


@dataclass(frozen=True, slots=True)
class MarkStepBadExit:
    """The ``bad-exit`` file: srun -K's failure was said (a restarted agent says it not
    again)."""

    key: StepKey
    rank: int
    exit_code: int


@dataclass(frozen=True, slots=True)
class CollectStep:
    """Read and remove the part's cgroup (``killed``: a task died of SIGKILL, which may
    have been the kernel's for memory); ``StepCollected`` follows."""

    key: StepKey
    killed: bool


@dataclass(frozen=True, slots=True)
class ReleaseStepJob:
    """No step of the job runs here any more: give back what the steps took for it (the
    job's CPUs and cgroup, where no batch script of it holds them)."""

    job_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class ForgetStep:
    """The server has the part's end: delete its folder."""

    key: StepKey


@dataclass(frozen=True, slots=True)
class SyncSoon:
    """Step output, an end, a failure or input progress waits: send a sync soon."""


StepEvent = (
    StepLaunchRequested
    | StepSignalRequested
    | StepInputArrived
    | StepAdopted
    | StepStarted
    | StepLaunchFailed
    | StepTasksFound
    | StepOutputRead
    | StepFedRead
    | StepTasksEnded
    | StepOverMemory
    | StepKeeperExited
    | StepCollected
    | StepsDelivered
)
StepCommand = (
    StartStep
    | SignalStep
    | SignalLocalStep
    | WriteStepError
    | WriteStepInput
    | MarkStepStopped
    | MarkStepTimedOut
    | MarkStepBadExit
    | CollectStep
    | ReleaseStepJob
    | ForgetStep
    | SyncSoon
)
