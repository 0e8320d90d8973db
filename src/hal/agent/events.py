"""The state machine's vocabulary: events in, commands out.

Events are facts the shell observed (a server instruction arrived, a process started or
exited, a step's files grew, time passed). Commands are what the machine wants done (fork
a job or a step's keeper, send a signal, persist a record, write a line, tell the
server). Both are plain frozen values so that a test can feed events and compare
commands without any I/O. (The server's own ``Launch``/``Signal``/``Cancel``/
``StepLaunch``... are called *instructions* on the wire; here they arrive wrapped in
events.) Job steps' own (ADR 0012) are in ``stepevents``; ``Event`` and ``Command`` are
the union of both.
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.agent.records import ExitOutcome, JobRecord
from hal.agent.stepevents import StepCommand, StepEvent
from hal.wire.agent import Cancel, JobReport, Launch, Limit, RunningStep, Signal

# --- events ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchRequested:
    launch: Launch
    time: float


@dataclass(frozen=True, slots=True)
class SignalRequested:
    request: Signal
    time: float


@dataclass(frozen=True, slots=True)
class CancelRequested:
    request: Cancel
    time: float


@dataclass(frozen=True, slots=True)
class LimitRequested:
    request: Limit
    time: float


@dataclass(frozen=True, slots=True)
class Registered:
    """The server accepted our registration: its grace period, the jobs to drop, and the
    step parts to end (a restarted server that does not know them, or their job ended
    while the agent was away)."""

    kill_wait_seconds: int
    kill: tuple[int, ...]
    time: float
    kill_steps: tuple[RunningStep, ...] = ()


@dataclass(frozen=True, slots=True)
class JobAdopted:
    """A job launched by an earlier agent process, found alive (or finished) on disk."""

    record: JobRecord
    time: float


@dataclass(frozen=True, slots=True)
class ProcessStarted:
    job_id: int
    attempt: int
    pid: int
    time: float


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    job_id: int
    attempt: int
    message: str
    time: float


@dataclass(frozen=True, slots=True)
class ProcessExited:
    job_id: int
    attempt: int
    outcome: ExitOutcome
    time: float


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed. The shell sends one at ``AgentState.next_deadline()``."""

    time: float


@dataclass(frozen=True, slots=True)
class ReportsAcked:
    acked_seq: int
    time: float


Event = (
    LaunchRequested
    | SignalRequested
    | CancelRequested
    | LimitRequested
    | Registered
    | JobAdopted
    | ProcessStarted
    | LaunchFailed
    | ProcessExited
    | Tick
    | ReportsAcked
    | StepEvent
)

# --- commands ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpawnJob:
    """Persist ``record`` and fork the job's step supervisor."""

    launch: Launch
    record: JobRecord


@dataclass(frozen=True, slots=True)
class SignalJob:
    job_id: int
    attempt: int
    pid: int
    signum: int
    group: bool  # the whole process group, else only the batch shell


@dataclass(frozen=True, slots=True)
class PersistRecord:
    record: JobRecord


@dataclass(frozen=True, slots=True)
class ForgetJob:
    """The server stored the job's final report: delete its files."""

    job_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class SendReport:
    """A new report is in the outbox; the shell should deliver it soon."""

    report: JobReport


@dataclass(frozen=True, slots=True)
class TellJob:
    """Write slurmstepd's line into the job's error output: the job is being ended at
    ``time``, cancelled (``why`` "") or ``DUE TO TIME LIMIT``."""

    job_id: int
    attempt: int
    why: str
    time: float


@dataclass(frozen=True, slots=True)
class MarkStopping:
    """The job is being ended: SIGTERM now, SIGKILL at ``kill_at``. Tells its step
    supervisor, so that what its batch shell leaves behind gets the same time to end on
    the SIGTERM (``supervisor.STOPPING_FILE``), as Slurm gives every process of a job
    KillWait, instead of a SIGKILL the moment the shell has gone."""

    job_id: int
    attempt: int
    kill_at: float


Command = (
    SpawnJob
    | SignalJob
    | PersistRecord
    | ForgetJob
    | SendReport
    | TellJob
    | MarkStopping
    | StepCommand
)
