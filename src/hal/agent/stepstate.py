"""``StepState``: the job steps' half of the agent's state machine (ADR 0012), sans IO.

``AgentState`` hands it every step event (``stepevents``) and checks its invariants after
each step, as for batch jobs; the shell's ``steps.StepShell`` starts keepers, follows
their files and signals their tasks. Here is every decision about this node's part of a
step: what to start, which parts a ``StepSignal`` names and what it does to them (the
SIGKILL after KillWait, slurmstepd's line), its own time limit (srun ``-t``), srun
``-K``'s first failure, a task stopped because its job is, the lines srun and slurmstepd
say at its end, its exit code, and which output, ends and input progress a sync carries
and what its answer lets go of.

Per part the life is::

    StepLaunchRequested ─StartStep─▶ STARTING ─StepStarted─▶ RUNNING ◀─ StepAdopted
                                         │ StepLaunchFailed      │ StepKeeperExited
                                         │                       ▼  (CollectStep)
                                         │                   COLLECTING
                                         │                       │ StepCollected
                                         ▼                       ▼
                                       ENDED: its end goes in the first sync that carries
                                              all its output; ForgetStep once answered

Signals, the time limit and its SIGKILL act in every phase but ENDED; a signal that
comes before the tasks are known is kept (``doomed``, ``stopped``) and delivered when
they are (``StepTasksFound``).

The tasks' output waits here, by offset per (rank, stream), until a sync that carried it
is answered (the server takes each byte once by its offset, so two syncs in flight may
both carry it); a part's end goes only with (or after) its last byte.
"""

from __future__ import annotations

import base64
import signal
from collections import deque
from dataclasses import dataclass, field

from hal.agent.records import InvariantViolation, StepKey, StepPhase, StepRecord, step_key
from hal.agent.stepevents import (
    CollectStep,
    ForgetStep,
    MarkStepBadExit,
    MarkStepStopped,
    MarkStepTimedOut,
    ReleaseStepJob,
    SignalLocalStep,
    SignalStep,
    StartStep,
    StepAdopted,
    StepCollected,
    StepCommand,
    StepEvent,
    StepFedRead,
    StepInputArrived,
    StepKeeperExited,
    StepLaunchFailed,
    StepLaunchRequested,
    StepOutgoing,
    StepOutputRead,
    StepOverMemory,
    StepsDelivered,
    StepSignalRequested,
    StepStarted,
    StepTasksEnded,
    StepTasksFound,
    SyncSoon,
    WriteStepError,
    WriteStepInput,
)
from hal.slurm.steps import (
    EXEC_FAILED,
    TIME_LIMIT,
    cancelled_message,
    force_terminated,
    oom_message,
    stamp,
    task_errors,
    terminating,
    worst_exit,
)
from hal.wire.agent import (
    RunningStep,
    StepBadExit,
    StepEnd,
    StepInputFed,
    StepOutput,
    StepSignal,
)
from hal.wire.steps import TaskTotals

RECENTLY_ENDED = 4096  # parts remembered once forgotten: a repeated launch is ignored
MAX_SYNC_BYTES = 1 << 20  # step output per sync; the rest goes with the next
KEEPER_LOST = (
    "srun: error: {node}: the step's keeper on this node died without recording its "
    "tasks' ends (killed by an operator or the OOM killer); its tasks were killed\n"
)
NEVER_STARTED = "srun: error: {node}: the agent stopped before the step's tasks started\n"
_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


@dataclass(slots=True)
class _Stream:
    sent: int = 0  # offset of data[0]: what an answered sync carried is gone
    data: bytearray = field(default_factory=bytearray)


class StepState:
    def __init__(self, node: str = "") -> None:
        self.node = node  # in srun's and slurmstepd's lines
        self.parts: dict[StepKey, StepRecord] = {}
        self._streams: dict[StepKey, dict[tuple[int, str], _Stream]] = {}
        self._done: deque[StepKey] = deque(maxlen=RECENTLY_ENDED)
        self._touched: set[StepKey] = set()  # since the last ``check``

    def handle(self, event: StepEvent) -> list[StepCommand]:
        """The commands for a step event (``AgentState.handle``'s, which checks after)."""
        match event:
            case StepLaunchRequested():
                return self.launch(event)
            case StepSignalRequested():
                return self.signal(event)
            case StepInputArrived():
                return self.input(event)
            case StepAdopted():
                return self.adopted(event)
            case StepStarted():
                return self.started(event)
            case StepLaunchFailed():
                return self.launch_failed(event)
            case StepTasksFound():
                return self.tasks_found(event)
            case StepOutputRead():
                return self.output_read(event)
            case StepFedRead():
                return self.fed_read(event)
            case StepTasksEnded():
                return self.tasks_ended(event)
            case StepOverMemory():
                return self.over_memory(event)
            case StepKeeperExited():
                return self.keeper_exited(event)
            case StepCollected():
                return self.collected(event)
            case StepsDelivered():
                return self.delivered(event)

    # -- queries --------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest time a ``Tick`` does something for a part: a time limit, a
        SIGKILL due."""
        times = [t for p in self.parts.values() for t in (p.deadline, p.kill_at or None) if t]
        return min(times, default=None)

    def running(self) -> list[RunningStep]:
        """The parts this node holds, their tasks running or their end not yet answered
        for (told to the server at registration: it keeps those it knows)."""
        return [RunningStep(job_id=j, attempt=a, step_id=s) for j, a, s in self.parts]

    def read_offset(self, key: StepKey, rank: int, stream: str) -> int:
        """Where the next read of a task's output file starts: what was read so far."""
        buf = self._streams.get(key, {}).get((rank, stream))
        return 0 if buf is None else buf.sent + len(buf.data)

    def interactive(self) -> bool:
        """Whether a part here runs in a terminal (srun --pty): its output goes at once."""
        return any(p.launch.pty and p.phase is not StepPhase.ENDED for p in self.parts.values())

    def pending(self) -> bool:
        """Whether a sync has something of the steps to carry."""
        return any(
            p.phase is StepPhase.ENDED
            or (p.failed is not None and not p.failed_sent)
            or p.fed != p.fed_sent  # (an ENDED part's is not sent: it is pending anyway)
            for p in self.parts.values()
        ) or any(b.data for streams in self._streams.values() for b in streams.values())

    def outgoing(self) -> StepOutgoing:
        """The output not yet answered for, at most ``MAX_SYNC_BYTES``, srun -K's
        failures (after their lines), the input progress, and the ends of parts whose
        output is all in it."""
        sent = StepOutgoing([], [], {})
        budget = MAX_SYNC_BYTES
        for key, part in self.parts.items():
            job_id, attempt, step_id = key
            ended = part.exit_code is not None  # (ENDED: checked)
            told = dict(part.fed_sent)
            for rank, offset in part.fed:  # srun's input: how far each task got
                if not ended and told.get(rank) != offset:
                    sent.fed[(key, rank)] = offset
                    sent.input_fed.append(
                        StepInputFed(
                            job_id=job_id,
                            step_id=step_id,
                            attempt=attempt,
                            rank=rank,
                            offset=max(offset, 0),
                            closed=offset < 0,
                        )
                    )
            complete = True
            for (rank, stream), buf in self._streams[key].items():
                if not buf.data:
                    continue
                chunk = bytes(buf.data[:budget])
                if len(chunk) < len(buf.data):
                    complete = False
                if not chunk:
                    continue
                budget -= len(chunk)
                sent.output.append(
                    StepOutput(
                        job_id=job_id,
                        step_id=step_id,
                        attempt=attempt,
                        rank=rank,
                        stream=stream,  # type: ignore[arg-type]
                        offset=buf.sent,
                        data_b64=base64.b64encode(chunk).decode(),
                    )
                )
                sent.upto[(key, rank, stream)] = buf.sent + len(chunk)
            if part.failed is not None and not part.failed_sent and complete:
                rank, code = part.failed  # (after its lines: they go in this sync too)
                sent.bad_exits.append(
                    StepBadExit(
                        job_id=job_id, step_id=step_id, attempt=attempt, rank=rank, exit_code=code
                    )
                )
            if part.exit_code is not None and complete:
                sent.ends.append(
                    StepEnd(
                        job_id=job_id,
                        step_id=step_id,
                        attempt=attempt,
                        exit_code=part.exit_code,
                        exit_signal=part.exit_signal,
                        oom=part.oom,
                        timed_out=part.timed_out,
                        tasks=list(part.totals),
                    )
                )
        return sent

    # -- the parts' life ------------------------------------------------------------------

    def launch(self, event: StepLaunchRequested) -> list[StepCommand]:
        key = step_key(event.launch)
        if key in self.parts or key in self._done:
            return []  # delivered twice, or ended and answered for
        self._add(StepRecord(event.launch))
        return [StartStep(event.launch)]

    def adopted(self, event: StepAdopted) -> list[StepCommand]:
        launch = event.launch
        key = step_key(launch)
        if key in self.parts:
            raise InvariantViolation(f"step part {key} adopted twice")
        failed = event.failed
        if failed is not None and not (launch.kill_on_bad_exit and failed[0] in launch.ranks):
            failed = None  # (a bad-exit file no agent of this step wrote: disregarded)
        part = StepRecord(launch, StepPhase.RUNNING, began=event.began, failed=failed)
        if event.timed_out_at is not None and launch.time_limit_seconds:
            # its limit came before the restart: only its SIGKILL is left to send
            kill_at = event.timed_out_at + launch.kill_wait_seconds
            part = part.evolve(timed_out=True, ending=True, kill_at=kill_at)
        self._add(part)
        return []

    def started(self, event: StepStarted) -> list[StepCommand]:
        part = self.parts.get(event.key)
        if part is None or part.phase is not StepPhase.STARTING:
            return []
        self._put(part.evolve(phase=StepPhase.RUNNING, began=event.time))
        return []

    def launch_failed(self, event: StepLaunchFailed) -> list[StepCommand]:
        part = self.parts.get(event.key)
        if part is None or part.phase is not StepPhase.STARTING:
            return []
        said = self._say(part, f"srun: error: {self.node}: {event.reason}\n")
        return [said, *self._end(part, EXEC_FAILED, 0, ())]

    def tasks_found(self, event: StepTasksFound) -> list[StepCommand]:
        part = self.parts.get(event.key)
        if part is None or part.tasks_known or part.phase is not StepPhase.RUNNING:
            return []
        part = part.evolve(tasks_known=True)
        commands: list[StepCommand] = []
        if part.stopped:  # its job was suspended before its tasks started
            part = self._signal(part, signal.SIGSTOP, commands)
        if part.doomed:
            part = self._signal(part, part.doomed, commands)
        self._put(part)
        return commands

    def keeper_exited(self, event: StepKeeperExited) -> list[StepCommand]:
        part = self.parts.get(event.key)
        if part is None or part.phase is not StepPhase.RUNNING:
            return []
        commands: list[StepCommand] = []
        codes = event.codes
        if codes is None:  # never started (no "go"), or killed outright: end what is left
            lost = KEEPER_LOST if event.recorded else NEVER_STARTED
            commands.append(self._say(part, lost.format(node=self.node)))
            part = self._signal(part, signal.SIGKILL, commands)
            code = -signal.SIGKILL if event.recorded else EXEC_FAILED
            codes = tuple((rank, code) for rank in part.launch.ranks)
        part = self._put(part.evolve(phase=StepPhase.COLLECTING, codes=codes))
        commands += self._bad_exit(part, (*event.ends, *sorted(codes)))
        killed = any(code == -signal.SIGKILL for _, code in codes)
        return [*commands, CollectStep(event.key, killed)]

    def collected(self, event: StepCollected) -> list[StepCommand]:
        part = self.parts.get(event.key)
        if part is None or part.phase is not StepPhase.COLLECTING:
            return []
        part = part.evolve(oom=part.oom or event.oom)
        launch = part.launch
        where = f"{launch.job_id}.{launch.step_id}"
        # srun's lines for this node's tasks, and slurmstepd's for an OOM kill, in the
        # step's error output, which srun relays (Slurm's, docs/slurm-checks.md)
        said = part.failed[0] if part.failed is not None else None  # (srun -K's, at once)
        codes = dict(part.codes)
        lines = task_errors(self.node, {r: c for r, c in codes.items() if r != said}, oom=part.oom)
        if event.oom_kills:
            lines.append(oom_message(self.node, event.oom_kills, where))
        if part.timed_out and launch.step_node_index == 0:  # srun's, once
            lines.append(force_terminated(where))
        commands: list[StepCommand] = []
        if lines:
            commands.append(self._say(part, "".join(f"{x}\n" for x in lines)))
        return commands + self._end(part, *worst_exit(codes.values()), event.totals)

    def _end(
        self, part: StepRecord, exit_code: int, exit_signal: int, totals: tuple[TaskTotals, ...]
    ) -> list[StepCommand]:
        self._put(
            part.evolve(
                phase=StepPhase.ENDED,
                exit_code=exit_code,
                exit_signal=exit_signal,
                totals=totals,
                kill_at=0.0,
            )
        )
        job_id, attempt, _ = part.key
        commands: list[StepCommand] = []
        if not any(
            (j, a) == (job_id, attempt) and other.phase is not StepPhase.ENDED
            for (j, a, _), other in self.parts.items()
        ):  # the job's last part here: what its steps took goes back
            commands.append(ReleaseStepJob(job_id, attempt))
        return [*commands, SyncSoon()]

    # -- signals and time -----------------------------------------------------------------

    def signal(self, event: StepSignalRequested) -> list[StepCommand]:
        request = event.request
        if request.local:
            return [SignalLocalStep(request)]
        commands: list[StepCommand] = []
        for key in self._signalled(request):
            part = self.parts[key]
            if part.phase is StepPhase.ENDED:
                continue
            ends = request.cancelled_at is not None or request.kill_wait_seconds is not None
            if ends or request.signal in _ENDING_SIGNALS:
                part = part.evolve(ending=True)  # (its tasks' deaths now are no -K failure)
            gone = part.tasks_known and key in event.tasks_gone
            if request.cancelled_at is not None and not gone:
                # scancel JOB.STEP or the job's end: slurmstepd's line (not again where
                # its tasks are gone: a restarted server repeats a scancel's kill)
                commands.append(self._tell(part, request.cancelled_at, request.reason))
            if request.kill_wait_seconds is not None:
                part = self._signal(part, signal.SIGCONT, commands)
                part = _kill_by(part, event.time + request.kill_wait_seconds)
            self._put(self._signal(part, request.signal, commands))
        return commands

    def tick(self, now: float) -> list[StepCommand]:
        commands: list[StepCommand] = []
        for key, part in list(self.parts.items()):
            deadline = part.deadline
            if deadline is not None and deadline <= now:
                # srun -t: slurmstepd's line, SIGTERM to its tasks, SIGKILL KillWait later
                part = part.evolve(timed_out=True, ending=True)
                commands += [MarkStepTimedOut(key), self._tell(part, now, TIME_LIMIT)]
                part = self._signal(part, signal.SIGCONT, commands)
                part = self._signal(part, signal.SIGTERM, commands)
                part = _kill_by(part, now + part.launch.kill_wait_seconds)
            if part.kill_at and part.kill_at <= now:
                part = self._signal(part.evolve(kill_at=0.0), signal.SIGKILL, commands)
            if part is not self.parts[key]:
                self._put(part)
        return commands

    def over_memory(self, event: StepOverMemory) -> list[StepCommand]:
        """rlimit backend: the part's tasks are SIGKILLed as out of memory, as the batch
        step's watchdog does (Slurm's OverMemoryKill)."""
        part = self.parts.get(event.key)
        if part is None or part.phase is StepPhase.ENDED:
            return []
        commands: list[StepCommand] = []
        self._put(self._signal(part.evolve(oom=True), signal.SIGKILL, commands))
        return commands

    def registered(self, kill: tuple[RunningStep, ...], wait: int, now: float) -> list[StepCommand]:
        """The server, at registration, does not want these: ended as a job's end ends
        its steps (SIGTERM, SIGKILL after KillWait)."""
        commands: list[StepCommand] = []
        for ref in kill:
            end = StepSignal(
                job_id=ref.job_id,
                step_id=ref.step_id,
                attempt=ref.attempt or 0,
                signal=signal.SIGTERM,
                kill_wait_seconds=wait,
            )
            commands += self.signal(StepSignalRequested(end, now))
        return commands

    def _signalled(self, request: StepSignal) -> list[StepKey]:
        """The parts ``request`` names: the job's step of its run (every step of the
        job: ``step_id`` None). A server from before it sent the run for local steps
        only, so a step id of one part alone here is that part, whatever its run."""
        if request.step_id is None:
            return [key for key in self.parts if key[0] == request.job_id]
        exact = (request.job_id, request.attempt, request.step_id)
        if exact in self.parts:
            return [exact]
        same = [key for key in self.parts if (key[0], key[2]) == (exact[0], exact[2])]
        return same if len(same) == 1 else []

    def _signal(self, part: StepRecord, signum: int, commands: list[StepCommand]) -> StepRecord:
        """``signum`` to the part's tasks, or kept for them while they are not known."""
        if signum in (signal.SIGSTOP, signal.SIGCONT):
            part = part.evolve(stopped=signum == signal.SIGSTOP)
            # first: a task the keeper starts now sees it
            commands.append(MarkStepStopped(part.key, part.stopped))
        elif not part.tasks_known and signum in _ENDING_SIGNALS and part.doomed != signal.SIGKILL:
            part = part.evolve(doomed=signum)  # delivered once the tasks are known
        if part.tasks_known:
            commands.append(SignalStep(part.key, signum))
        return part

    def _tell(self, part: StepRecord, when: float, why: str = "") -> WriteStepError:
        """slurmstepd's ``*** STEP J.S ON node CANCELLED AT ... ***`` line (scancel, its
        job's end, its own limit: ``why``), in the step's error output on this node."""
        where = f"{part.launch.job_id}.{part.launch.step_id}"
        line = cancelled_message(self.node, where, stamp(when), why, kind="STEP")
        return self._say(part, f"{line}\n")

    # -- srun -K ----------------------------------------------------------------------------

    def tasks_ended(self, event: StepTasksEnded) -> list[StepCommand]:
        part = self.parts.get(event.key)
        return [] if part is None else self._bad_exit(part, event.ends)

    def _bad_exit(self, part: StepRecord, ends: tuple[tuple[int, int], ...]) -> list[StepCommand]:
        """srun -K: the first of the part's tasks to fail (``ends`` as they came), unless
        the step is ending already: srun's line for it and its "Terminating StepId" in
        the task's error output, as Slurm 22.05.8's srun says them, and the failure
        reported to the server, which ends the step's other tasks on every node
        (``StepTable.bad_exit``)."""
        if not part.awaits_bad_exit:
            return []
        launch = part.launch
        for rank, code in ends:
            if code != 0 and rank in launch.ranks:
                part = self._put(part.evolve(failed=(rank, code)))
                where = f"{launch.job_id}.{launch.step_id}"
                lines = [*task_errors(self.node, {rank: code}, oom=part.oom), terminating(where)]
                said = "".join(f"{x}\n" for x in lines)
                return [
                    MarkStepBadExit(part.key, rank, code),
                    self._say(part, said, rank),
                    SyncSoon(),
                ]
        return []

    # -- files the shell read, and what a sync carried -----------------------------------------

    def output_read(self, event: StepOutputRead) -> list[StepCommand]:
        streams = self._streams.get(event.key)
        if streams is None or not event.data:
            return []
        buf = streams.setdefault((event.rank, event.stream), _Stream())
        if event.offset != buf.sent + len(buf.data):
            raise InvariantViolation(
                f"step part {event.key} rank {event.rank} {event.stream}: read from "
                f"{event.offset}, held up to {buf.sent + len(buf.data)}"
            )
        buf.data.extend(event.data)
        return [SyncSoon()]

    def fed_read(self, event: StepFedRead) -> list[StepCommand]:
        part = self.parts.get(event.key)
        if part is None or part.phase is StepPhase.ENDED or part.fed == event.fed:
            return []
        self._put(part.evolve(fed=event.fed))
        return [SyncSoon()]

    def input(self, event: StepInputArrived) -> list[StepCommand]:
        request = event.request
        key = (request.job_id, request.attempt, request.step_id)
        part = self.parts.get(key)
        if part is None or not part.launch.relay_ranks or part.phase is StepPhase.ENDED:
            return []  # (its tasks ended: what they did not read goes nowhere)
        return [WriteStepInput(key, request)]

    def delivered(self, event: StepsDelivered) -> list[StepCommand]:
        sent = event.sent
        for (key, rank, stream), end in sent.upto.items():
            buf = self._streams.get(key, {}).get((rank, stream))
            if buf is not None and end > buf.sent:
                del buf.data[: end - buf.sent]
                buf.sent = end
        told: dict[StepKey, dict[int, int]] = {}
        for (key, rank), offset in sent.fed.items():
            told.setdefault(key, {})[rank] = offset
        for key, offsets in told.items():
            if (part := self.parts.get(key)) is not None:
                fed_sent = {**dict(part.fed_sent), **offsets}
                self._put(part.evolve(fed_sent=tuple(sorted(fed_sent.items()))))
        for bad in sent.bad_exits:
            key = (bad.job_id, bad.attempt or 0, bad.step_id)
            if (part := self.parts.get(key)) is not None:
                self._put(part.evolve(failed_sent=True))
        commands: list[StepCommand] = []
        for answered in sent.ends:
            key = (answered.job_id, answered.attempt or 0, answered.step_id)
            if self.parts.pop(key, None) is not None:
                del self._streams[key]
                self._done.append(key)
                commands.append(ForgetStep(key))  # nothing left to report
        return commands

    # -- bookkeeping and invariants -------------------------------------------------------------

    def _add(self, part: StepRecord) -> None:
        self._put(part)
        self._streams[part.key] = {}

    def _put(self, part: StepRecord) -> StepRecord:
        """The part's record replaced (every change goes through here: ``check``)."""
        self.parts[part.key] = part
        self._touched.add(part.key)
        return part

    def _say(self, part: StepRecord, text: str, rank: int | None = None) -> WriteStepError:
        """The agent's lines in task ``rank``'s error output (the part's first rank's)."""
        return WriteStepError(part.key, part.launch.ranks[0] if rank is None else rank, text)

    def check(self) -> None:
        """The invariants of the parts the last event changed."""
        for key in self._touched:
            if key in self.parts:
                _check_part(key, self.parts[key])
        self._touched.clear()

    def validate(self) -> None:
        for key, part in self.parts.items():
            _check_part(key, part)
            if key in self._done:
                raise InvariantViolation(f"step part {key} both held and forgotten")
        if self._streams.keys() != self.parts.keys():
            raise InvariantViolation("step output held for parts not held, or missing")


def _check_part(key: StepKey, part: StepRecord) -> None:
    problem = ""
    phase = part.phase
    if part.key != key:
        problem = f"filed under {key}"
    elif phase is StepPhase.STARTING and (part.tasks_known or part.began or part.codes):
        problem = "a starting part with tasks, a start time or ends"
    elif phase is StepPhase.RUNNING and part.codes:
        problem = "a running part with its tasks' ends"
    elif phase is StepPhase.COLLECTING and not part.codes:
        problem = "a part whose keeper exited without its tasks' ends"
    elif (phase is StepPhase.ENDED) != (part.exit_code is not None):
        problem = "an exit code before the end, or an end without one"
    elif phase is StepPhase.ENDED and part.kill_at:
        problem = "an ended part with a SIGKILL due"
    elif part.failed is not None and not (
        part.launch.kill_on_bad_exit and part.failed[0] in part.launch.ranks
    ):
        problem = "a -K failure of a step without -K, or of another node's rank"
    elif part.failed_sent and part.failed is None:
        problem = "a -K failure answered for but never said"
    elif part.timed_out and not (part.ending and part.launch.time_limit_seconds):
        problem = "timed out without a time limit, or not ending"
    elif part.doomed not in (0, *_ENDING_SIGNALS):
        problem = f"kept signal {part.doomed} is none that ends tasks"
    if problem:
        raise InvariantViolation(f"step part {key}: {problem}: {part}")


def _kill_by(part: StepRecord, due: float) -> StepRecord:
    """A SIGKILL due at ``due``, unless one is due sooner."""
    return part.evolve(kill_at=min(part.kill_at, due) if part.kill_at else due)
