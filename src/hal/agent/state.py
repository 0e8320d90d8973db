"""``AgentState``: the node agent's sans-IO state machine.

Events in, commands out (see ``events``); no clock, no processes, no sockets. The shell
feeds every fact it observes through ``handle`` and carries out the commands it gets back;
tests do the same with a virtual clock. After every step the machine checks its
invariants, so a bad transition fails where it happens instead of three events later.

Per job the life is::

    LaunchRequested ──SpawnJob──▶ LAUNCHING ──ProcessStarted──▶ RUNNING
                                     │ LaunchFailed                │ time limit / Cancel
                                     ▼                             ▼   SIGCONT+SIGTERM
                                  report launch_failed          STOPPING ──kill_at──▶ SIGKILL
                                                                   │
    report finished ◀──────────────── ProcessExited ◀──────────────┘ (from any live phase)

A Cancel for an attempt that never started here (its Launch still on its way, lost, or
waiting for an older attempt to end) is reported finished at once, and that Launch is then
ignored; a Cancel for an attempt that has ended here, or an older one, changes nothing.

Reports go to an outbox with increasing ``seq`` and stay there until the server
acknowledges them (``ReportsAcked``); only then are the job's files forgotten, so an agent
crash between "job exited" and "server stored it" loses nothing.
"""

from __future__ import annotations

import signal
from collections import deque
from typing import Any

from hal.agent.events import (
    CancelRequested,
    Command,
    Event,
    ForgetJob,
    JobAdopted,
    LaunchFailed,
    LaunchRequested,
    LimitRequested,
    MarkStopping,
    PersistRecord,
    ProcessExited,
    ProcessStarted,
    Registered,
    ReportsAcked,
    SendReport,
    SignalJob,
    SignalRequested,
    SpawnJob,
    TellJob,
    Tick,
)
from hal.agent.records import ExitOutcome, JobRecord, Phase
from hal.agent.signals import parse_signal_spec, signal_name
from hal.core.errors import InvalidRequest
from hal.core.resources import MiB
from hal.core.states import JobState
from hal.slurm.steps import ENDED_SAYING, OOM_SIGNAL
from hal.wire.agent import JobReport, RunningJob

DEFAULT_KILL_WAIT_SECONDS = 30  # until the server tells us its KillWait
# the ends slurmstepd writes into the job's output, and why it says (docs/slurm-checks.md)
_TOLD = {state.value: why for state, why in ENDED_SAYING.items()}
RECENTLY_FINISHED = 4096  # (job, attempt) pairs remembered to ignore a repeated Launch


class InvariantViolation(RuntimeError):
    """The machine reached a state it must never be in: a bug, not a user error."""


class AgentState:
    def __init__(
        self,
        *,
        first_seq: int = 1,
        kill_wait_seconds: int = DEFAULT_KILL_WAIT_SECONDS,
        validate: bool = True,
    ) -> None:
        self.jobs: dict[int, JobRecord] = {}
        self.outbox: list[JobReport] = []  # unacknowledged reports, seq increasing
        self.acked_seq = first_seq - 1
        self.next_seq = first_seq
        self.kill_wait_seconds = kill_wait_seconds
        self.validate = validate  # full-state check after each step (tests); O(jobs)
        self._awaiting_ack: dict[tuple[int, int], int] = {}  # finished → final report seq
        self._finished: deque[tuple[int, int]] = deque(maxlen=RECENTLY_FINISHED)
        # a newer attempt's launch waiting for the old attempt, being stopped, to end
        self._deferred: dict[int, LaunchRequested] = {}

    # -- the one entry point ------------------------------------------------------------

    def handle(self, event: Event) -> list[Command]:
        match event:
            case LaunchRequested():
                commands = self._launch(event)
            case SignalRequested():
                commands = self._signal(event)
            case CancelRequested():
                commands = self._cancel(event)
            case LimitRequested():
                commands = self._limit(event)
            case Registered():
                commands = self._registered(event)
            case JobAdopted():
                commands = self._adopted(event)
            case ProcessStarted():
                commands = self._started(event)
            case LaunchFailed():
                commands = self._launch_failed(event)
            case ProcessExited():
                commands = self._exited(event)
            case Tick():
                commands = []
                for job in list(self.jobs.values()):
                    commands += self._deadlines(job, event.time)
            case ReportsAcked():
                commands = self._acked(event)
        self._check(commands)
        return commands

    # -- queries ------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest time at which a ``Tick`` would do something."""
        times = [t for job in self.jobs.values() if (t := _next_time(job)) is not None]
        return min(times, default=None)

    def running(self) -> list[RunningJob]:
        """Jobs this node supervises, for ``AgentRegister.running``."""
        return [
            RunningJob(job_id=j.job_id, attempt=j.attempt, pid=j.pid) for j in self.jobs.values()
        ]

    def unacked_reports(self) -> list[JobReport]:
        return list(self.outbox)

    # -- handlers -----------------------------------------------------------------------

    def _launch(self, event: LaunchRequested) -> list[Command]:
        launch, now = event.launch, event.time
        key = (launch.job_id, launch.attempt)
        current = self.jobs.get(launch.job_id)
        if current is not None:
            if current.attempt >= launch.attempt:
                return []  # delivered twice, or an older attempt's launch overtaken
            # The server requeued the job (e.g. while this node was silent) and placed the
            # new attempt here before the old one ended: end the old one, then start.
            self._deferred[launch.job_id] = event
            return self._request_stop(
                current, JobState.CANCELLED.value, self.kill_wait_seconds, now
            )
        if key in self._awaiting_ack or key in self._finished:
            return []  # this attempt already ran (or was cancelled) on this node
        spec = None
        if launch.signal:
            try:
                spec = parse_signal_spec(launch.signal)
            except InvalidRequest as err:
                return [
                    self._report(
                        "launch_failed", launch.job_id, launch.attempt, now, message=str(err)
                    )
                ]
        record = JobRecord(
            job_id=launch.job_id,
            attempt=launch.attempt,
            launch_time=now,
            time_limit_seconds=launch.time_limit_seconds,
            memory_bytes=launch.memory_bytes,
            cpus=launch.cpus,
            gpus=len(launch.gpu_ids),
            signal=spec,
        )
        self.jobs[launch.job_id] = record
        return [SpawnJob(launch, record)]

    def _started(self, event: ProcessStarted) -> list[Command]:
        job = self._current(event.job_id, event.attempt)
        if job is None or job.phase is not Phase.LAUNCHING:
            return []
        persist = not job.plain_start
        job = job.start(event.pid, event.time)
        commands: list[Command] = [
            self._report("started", job.job_id, job.attempt, event.time, pid=event.pid)
        ]
        for signum, group in job.pending_signals:
            job, sent = self._deliver(job, signum, group=group)
            job = _paused(job, signum, group, event.time)
            commands.append(sent)
        job = job.evolve(pending_signals=())
        if job.end_state:  # a Cancel arrived while the supervisor was starting the job
            job, stop = self._stop(job, job.end_state, job.kill_wait_seconds, event.time)
            commands += stop
        self.jobs[job.job_id] = job
        if persist:
            commands.append(PersistRecord(job))
        else:
            _check_job(job)  # not persisted (see JobRecord.plain_start): one write less per job
        return commands + self._deadlines(job, event.time)

    def _launch_failed(self, event: LaunchFailed) -> list[Command]:
        job = self._current(event.job_id, event.attempt)
        if job is None:
            return []
        del self.jobs[job.job_id]
        report = self._report(
            "launch_failed", job.job_id, job.attempt, event.time, message=event.message
        )
        self._finish_bookkeeping(job, report)
        return [report, *self._launch_deferred(job.job_id, event.time)]

    def _exited(self, event: ProcessExited) -> list[Command]:
        job = self._current(event.job_id, event.attempt)
        if job is None:
            return []
        del self.jobs[job.job_id]
        state, message = _final_state(job, event.outcome)
        out = event.outcome
        oom = state == JobState.OUT_OF_MEMORY.value
        code, sig = (0, OOM_SIGNAL) if oom else (out.exit_code, out.exit_signal)
        report = self._report(
            "finished",
            job.job_id,
            job.attempt,
            event.time,
            pid=job.pid,
            state=state,
            exit_code=code,
            exit_signal=sig,
            max_rss_bytes=out.max_rss_bytes,
            cpu_seconds=out.cpu_seconds,
            user_cpu_seconds=out.user_cpu_seconds,
            system_cpu_seconds=out.system_cpu_seconds,
            gpu=out.gpu,
            message=message,
        )
        self._finish_bookkeeping(job, report)
        return [report, *self._launch_deferred(job.job_id, event.time)]

    def _launch_deferred(self, job_id: int, now: float) -> list[Command]:
        """Start the newer attempt that waited for the one that just ended."""
        waiting = self._deferred.pop(job_id, None)
        if waiting is None:
            return []
        return self._launch(LaunchRequested(waiting.launch, now))

    def _signal(self, event: SignalRequested) -> list[Command]:
        req = event.request
        job = self.jobs.get(req.job_id)
        if job is None:
            return []  # nothing left to signal; the job's final report is on its way
        if job.phase is Phase.LAUNCHING:
            pending = (*job.pending_signals, (req.signal, not req.batch_only))
            job = job.evolve(pending_signals=pending)
            self.jobs[job.job_id] = job
            return [PersistRecord(job)]
        job, sent = self._deliver(job, req.signal, group=not req.batch_only)
        job = _paused(job, req.signal, not req.batch_only, event.time)
        self.jobs[job.job_id] = job
        return [sent, PersistRecord(job), *self._deadlines(job, event.time)]

    def _cancel(self, event: CancelRequested) -> list[Command]:
        req, now = event.request, event.time
        job = self.jobs.get(req.job_id)
        waiting = self._deferred.get(req.job_id)
        attempt = req.attempt
        if attempt is None:  # from a server that names no attempt: the newest one here
            newest = waiting.launch if waiting is not None else job
            if newest is None:
                return []
            attempt = newest.attempt
        if job is not None and job.attempt == attempt:
            return self._request_stop(job, req.state, req.kill_wait_seconds, now)
        key = (req.job_id, attempt)
        if (job is not None and job.attempt > attempt) or key in self._finished:
            return []  # an older attempt's, or one that has ended here (and was reported)
        # An attempt that has not started here: its launch waits for an older attempt
        # to end, is on its way (a Cancel may overtake it), or was lost (a node that
        # restarted). It ends before it starts: reported now, its launch then ignored.
        if waiting is not None and waiting.launch.attempt == attempt:
            del self._deferred[req.job_id]
        self._remember_finished(key)
        report = self._report(
            "finished",
            req.job_id,
            attempt,
            now,
            state=req.state,
            message=f"{req.state.lower()} before it started",
        )
        self._awaiting_ack[key] = report.report.seq
        return [report]

    def _limit(self, event: LimitRequested) -> list[Command]:
        """A new time limit for the attempt here, counted from its start as before: the
        job is stopped at once if it has already run that long."""
        req = event.request
        job = self._current(req.job_id, req.attempt)
        if job is None or job.phase is Phase.STOPPING:
            return []  # another attempt's, or ending anyway
        job = job.evolve(time_limit_seconds=req.time_limit_seconds)
        self.jobs[job.job_id] = job
        return [PersistRecord(job), *self._deadlines(job, event.time)]

    def _registered(self, event: Registered) -> list[Command]:
        self.kill_wait_seconds = event.kill_wait_seconds
        commands: list[Command] = []
        for job_id in event.kill:
            job = self.jobs.get(job_id)
            if job is not None:
                commands += self._request_stop(
                    job, JobState.CANCELLED.value, event.kill_wait_seconds, event.time
                )
        return commands

    def _adopted(self, event: JobAdopted) -> list[Command]:
        record = event.record
        if record.job_id in self.jobs:
            raise InvariantViolation(f"job {record.job_id} adopted twice")
        self.jobs[record.job_id] = record
        return self._deadlines(record, event.time)

    def _acked(self, event: ReportsAcked) -> list[Command]:
        if event.acked_seq <= self.acked_seq:
            return []  # an old or repeated ack (e.g. a reply that overtook another)
        self.acked_seq = min(event.acked_seq, self.next_seq - 1)
        self.outbox = [r for r in self.outbox if r.seq > self.acked_seq]
        done = [key for key, seq in self._awaiting_ack.items() if seq <= self.acked_seq]
        for key in done:
            del self._awaiting_ack[key]
        return [ForgetJob(job_id, attempt) for job_id, attempt in done]

    # -- transitions shared by handlers --------------------------------------------------

    def _request_stop(self, job: JobRecord, state: str, wait: int, now: float) -> list[Command]:
        if job.phase is Phase.LAUNCHING:
            # No pid yet: remember the stop and carry it out once the job has started.
            if not job.end_state:
                job = job.evolve(end_state=state, kill_wait_seconds=wait)
                self.jobs[job.job_id] = job
            return [PersistRecord(job)]
        if job.phase is Phase.STOPPING:
            # Already ending (time limit or an earlier cancel): keep the first reason, but
            # a shorter grace wins so that "scancel" after a timeout is not slower.
            if job.killed or now + wait >= job.kill_at:
                return []
            job = job.evolve(kill_at=now + wait)
            self.jobs[job.job_id] = job
            return [PersistRecord(job), *self._deadlines(job, now)]
        job, commands = self._stop(job, state, wait, now)
        self.jobs[job.job_id] = job
        return [*commands, PersistRecord(job)]

    def _stop(
        self, job: JobRecord, state: str, wait: int, now: float
    ) -> tuple[JobRecord, list[Command]]:
        """SIGCONT (a stopped job cannot act on SIGTERM) and SIGTERM to the process group,
        SIGKILL after ``wait`` seconds — Slurm's order."""
        job = job.evolve(
            phase=Phase.STOPPING, end_state=state, kill_wait_seconds=wait, kill_at=now + wait
        )
        commands: list[Command] = []
        if wait > 0:  # (first: the batch shell may end on the SIGTERM at once)
            commands.append(MarkStopping(job.job_id, job.attempt, job.kill_at))
        if state in _TOLD:  # "*** JOB 7 ON n1 CANCELLED AT ... ***", as slurmstepd's
            commands.append(TellJob(job.job_id, job.attempt, _TOLD[state], now))
        commands += [
            self._signal_command(job, signal.SIGCONT, group=True),
            self._signal_command(job, signal.SIGTERM, group=True),
        ]
        if wait <= 0:
            commands.append(self._signal_command(job, signal.SIGKILL, group=True))
            job = job.evolve(killed=True)
        return job, commands

    def _deadlines(self, job: JobRecord, now: float) -> list[Command]:
        """Whatever is due for ``job`` at ``now``: --signal=B:, the time limit, SIGKILL.
        (``--signal`` without ``B:`` goes to the job's steps, not its batch shell: the
        server sends it, ``hal.state.step_signal``.)"""
        commands: list[Command] = []
        start = job
        deadline = job.deadline
        if job.phase is Phase.RUNNING and deadline is not None:
            spec = job.signal
            due = spec is not None and now >= deadline - spec.seconds_before
            if spec is not None and spec.batch_only and not job.signal_sent and due:
                job, sent = self._deliver(job, spec.signum, group=False)
                job = job.evolve(signal_sent=True)
                commands.append(sent)
            if now >= deadline:
                job, stop = self._stop(job, JobState.TIMEOUT.value, self.kill_wait_seconds, now)
                commands += stop
        if job.phase is Phase.STOPPING and not job.killed and now >= job.kill_at:
            commands.append(self._signal_command(job, signal.SIGKILL, group=True))
            job = job.evolve(killed=True)
        if job is not start:
            self.jobs[job.job_id] = job
            commands.append(PersistRecord(job))
        return commands

    def _deliver(self, job: JobRecord, signum: int, *, group: bool) -> tuple[JobRecord, Command]:
        job = job.evolve(hal_signals=tuple(sorted({*job.hal_signals, signum})))
        return job, self._signal_command(job, signum, group=group)

    @staticmethod
    def _signal_command(job: JobRecord, signum: int, *, group: bool) -> SignalJob:
        return SignalJob(job.job_id, job.attempt, job.pid, int(signum), group)

    def _current(self, job_id: int, attempt: int) -> JobRecord | None:
        """The job this event is about, or ``None`` for a stale event of another attempt."""
        job = self.jobs.get(job_id)
        return job if job is not None and job.attempt == attempt else None

    def _report(
        self, kind: Any, job_id: int, attempt: int, now: float, **fields: Any
    ) -> SendReport:
        report = JobReport(
            seq=self.next_seq, job_id=job_id, attempt=attempt, kind=kind, time=now, **fields
        )
        self.next_seq += 1
        self.outbox.append(report)
        return SendReport(report)

    def _finish_bookkeeping(self, job: JobRecord, report: SendReport) -> None:
        key = (job.job_id, job.attempt)
        self._awaiting_ack[key] = report.report.seq
        self._remember_finished(key)

    def _remember_finished(self, key: tuple[int, int]) -> None:
        self._finished.append(key)

    # -- invariants ---------------------------------------------------------------------

    def _check(self, commands: list[Command]) -> None:
        touched = {c.record.job_id for c in commands if isinstance(c, PersistRecord | SpawnJob)}
        for job_id in touched:
            if job_id in self.jobs:
                _check_job(self.jobs[job_id])
        if self.validate:
            self.validate_state()

    def validate_state(self) -> None:
        for job_id, job in self.jobs.items():
            if job.job_id != job_id:
                raise InvariantViolation(f"job {job.job_id} filed under {job_id}")
            _check_job(job)
            if (job.job_id, job.attempt) in self._awaiting_ack:
                raise InvariantViolation(f"job {job_id} both running and finished")
        seqs = [r.seq for r in self.outbox]
        if seqs != sorted(set(seqs)):
            raise InvariantViolation(f"outbox out of order: {seqs}")
        if seqs and (seqs[0] <= self.acked_seq or seqs[-1] >= self.next_seq):
            raise InvariantViolation(
                f"outbox {seqs[0]}..{seqs[-1]} outside ({self.acked_seq}, {self.next_seq})"
            )
        if any(seq > self.acked_seq and seq not in seqs for seq in self._awaiting_ack.values()):
            raise InvariantViolation("a final report left the outbox before it was acked")


def _check_job(job: JobRecord) -> None:
    problem = ""
    if job.phase is Phase.LAUNCHING and (job.pid or job.kill_at or job.killed):
        problem = "a launching job has a pid or a kill time"
    elif job.phase is Phase.RUNNING and (job.pid <= 0 or job.end_state or job.kill_at):
        problem = "a running job without pid, or with a stop reason"
    elif job.phase is Phase.STOPPING and (job.pid <= 0 or not job.end_state or not job.kill_at):
        problem = "a stopping job without pid, reason or kill time"
    elif job.signal_sent and job.signal is None:
        problem = "--signal sent but none was asked for"
    if problem:
        raise InvariantViolation(f"job {job.job_id}: {problem}: {job}")


def _paused(job: JobRecord, signum: int, group: bool, now: float) -> JobRecord:
    """A SIGSTOP to the whole job stops its limit clock; a SIGCONT starts it again."""
    if signum == signal.SIGSTOP and group and not job.suspended_at:
        return job.evolve(suspended_at=now)
    if signum == signal.SIGCONT and job.suspended_at:
        paused = max(0.0, now - job.suspended_at)
        return job.evolve(suspended_at=0.0, suspended_seconds=job.suspended_seconds + paused)
    return job


def _next_time(job: JobRecord) -> float | None:
    if job.phase is Phase.STOPPING:
        return None if job.killed else job.kill_at
    deadline = job.deadline
    if deadline is None:
        return None
    if job.signal is not None and job.signal.batch_only and not job.signal_sent:
        return deadline - job.signal.seconds_before  # (without B: the server's to send)
    return deadline


def _final_state(job: JobRecord, out: ExitOutcome) -> tuple[str, str]:
    """The job's end state and a sentence for the user, from who ended it and how."""
    how = (
        f"killed by {signal_name(out.exit_signal)}"
        if out.exit_signal
        else f"exit code {out.exit_code}"
    )
    if out.lost:
        # Nobody saw how the script ended: slurmctld ends a batch job whose slurmstepd is
        # gone as NODE_FAIL (and requeues it if it may be), as the server does here. A
        # stop HAL had begun (cancel, time limit, requeue) keeps its state.
        state = job.end_state or JobState.NODE_FAIL.value
        return state, out.message or "the step supervisor vanished"
    if job.end_state:
        if job.end_state == JobState.TIMEOUT.value:
            why = f"time limit of {job.time_limit_seconds}s reached"
        else:
            why = job.end_state.lower()
        return job.end_state, f"{why}; {how}"
    if out.oom:
        limit = f" of {job.memory_bytes // MiB} MiB" if job.memory_bytes else ""
        return JobState.OUT_OF_MEMORY.value, f"memory limit{limit} exceeded; {how}"
    if out.exit_signal:
        # Slurm's: a job that dies of ``scancel -s KILL`` (or ``-b``) is CANCELLED, of any
        # other signal, whoever sent it (``scancel -f -s USR1``, ``--signal``), FAILED
        if out.exit_signal == signal.SIGKILL and signal.SIGKILL in job.hal_signals:
            return JobState.CANCELLED.value, f"{how} sent by HAL"
        return JobState.FAILED.value, how
    if out.exit_code:
        return JobState.FAILED.value, how
    return JobState.COMPLETED.value, ""
