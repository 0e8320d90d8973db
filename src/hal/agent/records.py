"""``JobRecord``: what the agent knows about one job it supervises; ``ExitOutcome``: how
its batch script ended; ``StepRecord``: what it knows about this node's part of a job
step (ADR 0012).

The state machine keeps one immutable record per job and per step part and replaces it on
every change. The shell persists a job's (``PersistRecord``) so that a restarted agent
can take over where the old one stopped — including a stop in progress (``end_state``,
``kill_at``), which must still end as TIMEOUT or CANCELLED rather than as a FAILED job
killed by a stray signal. A step part's lives in memory; what a restarted agent must
know of it the step's folder holds (``stepfolder``), and adoption rebuilds the record
from that (``StepAdopted``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from hal.core.job import SignalSpec

if TYPE_CHECKING:  # (the step launcher imports this module: no pydantic there)
    from hal.wire.agent import StepLaunch
    from hal.wire.jobs import GpuUsage
    from hal.wire.steps import TaskTotals

StepKey = tuple[int, int, int]  # (job id, its run: the job's restarts, step id)


class InvariantViolation(RuntimeError):
    """The machine reached a state it must never be in (a job's or a step part's): a bug,
    not a user error."""


class Phase(StrEnum):
    LAUNCHING = "LAUNCHING"  # the supervisor is forked, the job's pid is not known yet
    RUNNING = "RUNNING"  # the batch script runs
    STOPPING = "STOPPING"  # HAL sent SIGTERM (time limit or cancel); SIGKILL at kill_at


@dataclass(frozen=True, slots=True)
class JobRecord:
    job_id: int
    attempt: int
    phase: Phase = Phase.LAUNCHING
    pid: int = 0  # the batch shell, leader of the job's process group
    launch_time: float = 0.0
    start_time: float = 0.0  # when the script was exec'd (the time limit counts from here)
    time_limit_seconds: int = 0  # 0 = unlimited
    memory_bytes: int = 0
    cpus: int = 0  # allocated on this node (0 in records an older agent wrote: unknown)
    gpus: int = 0
    signal: SignalSpec | None = None  # --signal, delivered before the time limit
    signal_sent: bool = False
    end_state: str = ""  # why HAL is ending the job: TIMEOUT, CANCELLED, PREEMPTED ...
    kill_wait_seconds: int = 0  # the grace between SIGTERM and SIGKILL for that stop
    kill_at: float = 0.0  # when SIGKILL is due (STOPPING only)
    killed: bool = False  # SIGKILL was sent
    hal_signals: tuple[int, ...] = ()  # signals HAL delivered (dying of its SIGKILL: CANCELLED)
    pending_signals: tuple[tuple[int, bool], ...] = ()  # (signum, whole group) while launching
    # ``scontrol suspend``: when HAL stopped the job (SIGSTOP; 0: not suspended), and the
    # seconds it spent suspended before; suspended time does not count toward the limit
    suspended_at: float = 0.0
    suspended_seconds: float = 0.0

    @property
    def deadline(self) -> float | None:
        """When the time limit is reached, or ``None`` when unlimited, not started or
        suspended (the limit is pushed back by the time spent suspended)."""
        if self.time_limit_seconds <= 0 or self.phase is Phase.LAUNCHING or self.suspended_at:
            return None
        return self.start_time + self.time_limit_seconds + self.suspended_seconds

    @property
    def plain_start(self) -> bool:
        """Whether starting this LAUNCHING job changes nothing but phase, pid and start
        time (no signal or stop waits for the start). Such a start is not persisted: the
        supervisor's ``started`` file holds it, and adoption rebuilds it with ``start``."""
        return not self.pending_signals and not self.end_state

    def start(self, pid: int, start_time: float) -> JobRecord:
        return replace(self, phase=Phase.RUNNING, pid=pid, start_time=start_time)

    def evolve(self, **changes: Any) -> JobRecord:
        return replace(self, **changes)

    def to_json(self) -> str:
        # a shallow dict, not ``asdict`` (a recursive copy, a third of the cost of
        # writing a job's folder): the same JSON
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        data["phase"] = self.phase.value
        if self.signal is not None:
            data["signal"] = asdict(self.signal)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        data = json.loads(text)
        spec = data.pop("signal", None)
        return cls(
            **{
                **data,
                "phase": Phase(data["phase"]),
                "signal": SignalSpec(**spec) if spec else None,
                "hal_signals": tuple(data.get("hal_signals", ())),
                "pending_signals": tuple(
                    (int(s), bool(g)) for s, g in data.get("pending_signals", ())
                ),
            }
        )


@dataclass(frozen=True, slots=True)
class ExitOutcome:
    """How the batch script ended, as the step supervisor observed it."""

    exit_code: int = 0
    exit_signal: int = 0
    oom: bool = False  # the isolation backend saw the job hit its memory limit
    max_rss_bytes: int = 0
    cpu_seconds: float = 0.0  # user + system
    user_cpu_seconds: float | None = None  # ... apart (None: a supervisor before them)
    system_cpu_seconds: float | None = None
    gpu: GpuUsage | None = None  # the agent's GPU samples of the job (``agent.gpuusage``)
    lost: bool = False  # the supervisor vanished without writing the status
    message: str = ""
    end_time: float = 0.0  # when the supervisor saw the script end (0: not known)


_RECORD_FIELDS = tuple(f.name for f in fields(JobRecord))


def step_key(launch: StepLaunch) -> StepKey:
    return (launch.job_id, launch.launch.attempt, launch.step_id)


class StepPhase(StrEnum):
    STARTING = "STARTING"  # its keeper is being started (environment, artifacts, cgroup, fork)
    RUNNING = "RUNNING"  # its keeper runs (started here, or adopted); its tasks, once found
    COLLECTING = "COLLECTING"  # the keeper has exited: the step's cgroup is read and removed
    ENDED = "ENDED"  # the node's end is known; it waits for a sync to carry it (and its output)


@dataclass(frozen=True, slots=True)
class StepRecord:
    launch: StepLaunch
    phase: StepPhase = StepPhase.STARTING
    began: float = 0.0  # when its keeper started: its own time limit (srun -t) counts from here
    tasks_known: bool = False  # the keeper has recorded its tasks (signals reach them)
    # its job is suspended (SIGSTOP came, no SIGCONT since): a task started now stops too
    stopped: bool = False
    doomed: int = 0  # a signal to end it that came before its tasks were known
    # being ended (its time limit, scancel, srun's SIGINT/SIGTERM, its job's end): a task
    # that dies now is no srun -K failure
    ending: bool = False
    timed_out: bool = False  # its own time limit (srun -t) came
    kill_at: float = 0.0  # when a SIGKILL is due (0: none)
    # srun -K: (rank, exit code; -N: signal N) of its task here whose failure was said,
    # and whether a sync carrying it was answered
    failed: tuple[int, int] | None = None
    failed_sent: bool = False
    oom: bool = False  # a task was killed for the job's memory limit
    codes: tuple[tuple[int, int], ...] = ()  # (rank, exit code; -N: signal N), once all ended
    exit_code: int | None = None  # the node's end: the highest task's, 128+N for a signal N
    exit_signal: int = 0  # the signal that ended the task of ``exit_code`` (0: it exited)
    totals: tuple[TaskTotals, ...] = ()  # what each task used, once ended
    # srun's relayed stdin: (rank, how far its task got; -1: it takes no more) as last
    # read, and as a sync that was answered carried it
    fed: tuple[tuple[int, int], ...] = ()
    fed_sent: tuple[tuple[int, int], ...] = ()

    @property
    def key(self) -> StepKey:
        return step_key(self.launch)

    @property
    def deadline(self) -> float | None:
        """When its own time limit comes, or ``None``: none, not started, already come,
        or ended."""
        limit = self.launch.time_limit_seconds
        if not limit or self.timed_out or self.phase not in _FOLLOWED:
            return None
        return self.began + limit

    @property
    def awaits_bad_exit(self) -> bool:
        """srun -K: whether a task's failure here would still be said and reported."""
        return (
            self.launch.kill_on_bad_exit
            and self.failed is None
            and not self.ending
            and self.phase is not StepPhase.ENDED
        )

    def evolve(self, **changes: Any) -> StepRecord:
        return replace(self, **changes)


_FOLLOWED = (StepPhase.RUNNING, StepPhase.COLLECTING)  # its time limit counts
