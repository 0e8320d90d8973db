"""The job steps' half of the agent's state machine (``hal.agent.stepstate``), driven by
step events on a virtual clock: no processes, no files. Each case is a node's part of a
real step: what srun, scancel, a time limit, a suspended job or a dying keeper make the
agent do, and what the next sync carries."""

from __future__ import annotations

import base64
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_step_tasks import step

from hal.agent.events import Command, Event, Registered, Tick
from hal.agent.records import InvariantViolation, StepKey, StepPhase, StepRecord
from hal.agent.state import AgentState
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
from hal.agent.stepstate import MAX_SYNC_BYTES
from hal.core.clock import VirtualClock
from hal.wire.agent import RunningStep, StepInput, StepLaunch, StepSignal
from hal.wire.steps import TaskTotals

TERM, KILL, CONT, STOP = signal.SIGTERM, signal.SIGKILL, signal.SIGCONT, signal.SIGSTOP
INT, USR1 = signal.SIGINT, signal.SIGUSR1
KEY: StepKey = (12, 0, 3)  # job 12, its first run, step 3


def step_launch(step_id: int = 3, ranks: tuple[int, ...] = (2, 3), **changes: Any) -> StepLaunch:
    """This node's ranks 2 and 3 of step 3 of job 12 (``changes``: the StepLaunch's, and
    ``attempt``, the job's run)."""
    launch = step(Path("/w"), "./app", list(ranks), step_id)
    job = launch.launch.model_copy(update={"attempt": changes.pop("attempt", 0)})
    return launch.model_copy(update={"launch": job, "kill_wait_seconds": 10, **changes})


class Node:
    """The machine of node ``n1`` fed at the virtual clock's time; keeps what came out."""

    def __init__(self) -> None:
        self.clock = VirtualClock(1000.0)
        self.machine = AgentState(node="n1", kill_wait_seconds=30)

    @property
    def now(self) -> float:
        return self.clock.now()

    def part(self, key: StepKey = KEY) -> StepRecord:
        return self.machine.steps.parts[key]

    def handle(self, event: Event) -> list[Command]:
        return self.machine.handle(event)

    def launch(self, launch: StepLaunch | None = None) -> list[Command]:
        return self.handle(StepLaunchRequested(launch or step_launch(), self.now))

    def start(self, key: StepKey = KEY) -> list[Command]:
        return self.handle(StepStarted(key, self.now))

    def found(self, key: StepKey = KEY) -> list[Command]:
        return self.handle(StepTasksFound(key, self.now))

    def running(self, launch: StepLaunch | None = None) -> None:
        """A part started here whose keeper recorded its tasks."""
        launch = launch or step_launch()
        key = (12, launch.launch.attempt, launch.step_id)
        self.launch(launch)
        self.start(key)
        self.found(key)

    def signal(
        self, signum: int, gone: frozenset[StepKey] = frozenset(), **req: Any
    ) -> list[Command]:
        request = StepSignal(job_id=12, step_id=req.pop("step_id", 3), signal=signum, **req)
        return self.handle(StepSignalRequested(request, self.now, gone))

    def tick(self, seconds: float) -> list[Command]:
        self.clock.advance(seconds)
        return self.handle(Tick(self.now))

    def exited(
        self, codes: dict[int, int] | None, *, recorded: bool = True, ends: tuple[Any, ...] = ()
    ) -> list[Command]:
        found = None if codes is None else tuple(sorted(codes.items()))
        return self.handle(StepKeeperExited(KEY, found, recorded, ends, self.now))

    def collected(self, oom_kills: int = 0, totals: tuple[TaskTotals, ...] = ()) -> list[Command]:
        return self.handle(StepCollected(KEY, oom_kills > 0, oom_kills, totals, self.now))

    def read(self, rank: int, data: bytes, stream: str = "stdout") -> list[Command]:
        offset = self.machine.steps.read_offset(KEY, rank, stream)
        return self.handle(StepOutputRead(KEY, rank, stream, offset, data, self.now))

    def deliver(self, sent: StepOutgoing) -> list[Command]:
        return self.handle(StepsDelivered(sent, self.now))


def sent_signals(commands: list[Command]) -> list[int]:
    return [c.signum for c in commands if isinstance(c, SignalStep)]


def said(commands: list[Command]) -> list[str]:
    """The agent's lines written into the tasks' error output, in order."""
    return [line for c in commands if isinstance(c, WriteStepError) for line in c.text.splitlines()]


def kinds(commands: list[Command]) -> list[str]:
    return [type(c).__name__ for c in commands]


# -- a part's life -------------------------------------------------------------------------


def test_a_launch_starts_the_keeper_once_and_never_again_once_forgotten() -> None:
    n = Node()
    assert n.launch() == [StartStep(step_launch())]
    assert n.part().phase is StepPhase.STARTING
    assert n.launch() == []  # (two syncs in flight both carried it)
    assert n.start() == [] and n.part().phase is StepPhase.RUNNING
    assert n.part().began == n.now
    n.found()
    n.exited({2: 0, 3: 0})
    n.collected()
    n.deliver(n.machine.steps.outgoing())
    assert KEY not in n.machine.steps.parts
    assert n.launch() == []  # the server's resend after the end was answered


def test_a_keeper_that_cannot_start_ends_the_part_with_srun_s_line() -> None:
    n = Node()
    n.launch()
    commands = n.handle(StepLaunchFailed(KEY, "cannot create the step's cgroup: EPERM", n.now))
    assert said(commands) == ["srun: error: n1: cannot create the step's cgroup: EPERM"]
    assert next(c for c in commands if isinstance(c, WriteStepError)).rank == 2  # its first
    assert ReleaseStepJob(12, 0) in commands and SyncSoon() in commands
    part = n.part()
    assert (part.phase, part.exit_code, part.exit_signal) == (StepPhase.ENDED, 2, 0)
    assert n.start() == [] and n.part().phase is StepPhase.ENDED  # (a late start: ignored)


@dataclass
class EndCase:
    """A keeper's end: what it recorded, and what the node's end says."""

    codes: dict[int, int] | None
    recorded: bool = True
    oom_kills: int = 0
    exit: tuple[int, int] = (0, 0)  # exit code, signal
    killed: bool = False  # CollectStep's: a task died of SIGKILL
    lines: list[str] = field(default_factory=list)


END_CASES = {
    "all exited 0": EndCase({2: 0, 3: 0}),
    "the highest exit code": EndCase(
        {2: 1, 3: 4},
        exit=(4, 0),
        lines=[
            "srun: error: n1: task 2: Exited with exit code 1",
            "srun: error: n1: task 3: Exited with exit code 4",
        ],
    ),
    "a signal beats an equal exit code": EndCase(
        {2: 143, 3: -15},
        exit=(143, 15),
        lines=[
            "srun: error: n1: task 2: Exited with exit code 143",
            "srun: error: n1: task 3: Terminated",
        ],
    ),
    "killed for memory": EndCase(
        {2: -9, 3: 0},
        oom_kills=1,
        exit=(137, 9),
        killed=True,
        lines=[
            "srun: error: n1: task 2: Out Of Memory",
            "slurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=12.3. Some of your "
            "processes may have been killed by the cgroup out-of-memory handler.",
        ],
    ),
    "a keeper killed outright": EndCase(
        None,
        exit=(137, 9),
        killed=True,
        lines=[
            "srun: error: n1: the step's keeper on this node died without recording its "
            "tasks' ends (killed by an operator or the OOM killer); its tasks were killed",
            "srun: error: n1: tasks 2-3: Killed",
        ],
    ),
    "a keeper never started": EndCase(
        None,
        recorded=False,
        exit=(2, 0),
        lines=[
            "srun: error: n1: the agent stopped before the step's tasks started",
            "srun: error: n1: tasks 2-3: Exited with exit code 2",
        ],
    ),
}


@pytest.mark.parametrize("case", END_CASES.values(), ids=END_CASES.keys())
def test_the_node_s_end_from_the_keeper_s(case: EndCase) -> None:
    n = Node()
    n.running()
    exited = n.exited(case.codes, recorded=case.recorded)
    assert n.part().phase is StepPhase.COLLECTING
    assert exited[-1] == CollectStep(KEY, case.killed)
    if case.codes is None and case.recorded:
        assert sent_signals(exited) == [KILL]  # what the dead keeper's tasks left
    totals = (TaskTotals(rank=2, max_rss_bytes=5, cpu_seconds=1.0),)
    collected = n.collected(case.oom_kills, totals)
    assert said(exited) + said(collected) == case.lines
    part = n.part()
    assert (part.exit_code, part.exit_signal) == case.exit
    assert part.oom == bool(case.oom_kills) and part.totals == totals
    (end,) = n.machine.steps.outgoing().ends
    assert (end.exit_code, end.exit_signal, end.oom, end.tasks) == (
        *case.exit,
        bool(case.oom_kills),
        list(totals),
    )


def test_the_job_s_resources_go_back_with_its_last_part_here() -> None:
    n = Node()
    n.running()
    other = step_launch(step_id=4, ranks=(2,))
    n.running(other)
    n.exited({2: 0, 3: 0})
    assert ReleaseStepJob(12, 0) not in n.collected()  # step 4 still runs
    n.handle(StepKeeperExited((12, 0, 4), ((2, 0),), True, (), n.now))
    assert ReleaseStepJob(12, 0) in n.handle(StepCollected((12, 0, 4), False, 0, (), n.now))


# -- signals --------------------------------------------------------------------------------


@dataclass
class SignalCase:
    """StepSignals in order, and what reaches the tasks (now, and once found)."""

    signals: list[tuple[int, dict[str, Any]]]
    tasks_known: bool
    now: list[int]  # signals sent to the tasks as they came
    at_found: list[int] = field(default_factory=list)  # sent when the keeper records them
    stopped: bool = False
    ending: bool = False


SIGNAL_CASES = {
    "a signal reaches known tasks": SignalCase([(USR1, {})], True, [USR1]),
    "kept until the tasks are known": SignalCase([(TERM, {})], False, [], [TERM], ending=True),
    "a kept SIGKILL is not lowered": SignalCase(
        [(KILL, {}), (TERM, {})], False, [], [KILL], ending=True
    ),
    "a signal that ends nothing is not kept": SignalCase([(USR1, {})], False, []),
    "suspended before its tasks started": SignalCase([(STOP, {})], False, [], [STOP], stopped=True),
    "suspended, then resumed": SignalCase([(STOP, {}), (CONT, {})], True, [STOP, CONT]),
    "its job's end: SIGCONT first": SignalCase(
        [(TERM, {"kill_wait_seconds": 5})], True, [CONT, TERM], ending=True
    ),
    "srun's SIGINT ends it": SignalCase([(INT, {})], True, [INT], ending=True),
}


@pytest.mark.parametrize("case", SIGNAL_CASES.values(), ids=SIGNAL_CASES.keys())
def test_step_signals(case: SignalCase) -> None:
    n = Node()
    n.launch()
    n.start()
    if case.tasks_known:
        n.found()
    sent: list[int] = []
    for signum, fields in case.signals:
        sent += sent_signals(n.signal(signum, **fields))
    assert sent == case.now
    if not case.tasks_known:
        assert sent_signals(n.found()) == case.at_found
    part = n.part()
    assert (part.stopped, part.ending) == (case.stopped, case.ending)


def test_a_stop_is_marked_in_the_folder_before_it_is_sent() -> None:
    """A task the keeper starts between the two must see it (``stopped`` file)."""
    n = Node()
    n.running()
    commands = n.signal(STOP)
    assert commands == [MarkStepStopped(KEY, True), SignalStep(KEY, STOP)]
    assert n.signal(CONT)[0] == MarkStepStopped(KEY, False)


def test_sigkill_comes_kill_wait_after_the_job_s_end_and_once() -> None:
    n = Node()
    n.running()
    n.signal(TERM, kill_wait_seconds=5)
    n.tick(2)
    n.signal(TERM, kill_wait_seconds=10)  # a later, longer one keeps the first SIGKILL
    assert n.machine.next_deadline() == 1005.0
    assert sent_signals(n.tick(2.9)) == []
    assert sent_signals(n.tick(0.1)) == [KILL]
    assert sent_signals(n.tick(100)) == [] and n.machine.next_deadline() is None


def test_a_cancel_writes_slurmstepd_s_line_only_where_tasks_still_run() -> None:
    """scancel JOB.STEP: the STEP line, then the kill; a restarted server repeats the
    kill, and where the tasks are gone the line is not written again."""
    n = Node()
    n.running()
    when = 1_700_000_000.0
    first = n.signal(KILL, cancelled_at=when)
    (line,) = said(first)
    assert line.startswith("slurmstepd-n1: error: *** STEP 12.3 ON n1 CANCELLED AT ")
    assert kinds(first) == ["WriteStepError", "SignalStep"]  # the line before the kill
    assert said(n.signal(KILL, frozenset({KEY}), cancelled_at=when)) == []


def test_a_signal_names_its_run_and_all_steps_when_none() -> None:
    n = Node()
    n.running()
    n.running(step_launch(step_id=4))
    assert {c.key for c in n.signal(USR1, step_id=None) if isinstance(c, SignalStep)} == {
        KEY,
        (12, 0, 4),
    }
    # a server from before the run was sent (attempt 0) still reaches a part of run 1
    n.running(step_launch(step_id=7, attempt=1))
    assert [c.key for c in n.signal(USR1, step_id=7) if isinstance(c, SignalStep)] == [(12, 1, 7)]
    assert n.signal(USR1, step_id=99) == []


def test_a_local_step_s_signal_goes_to_srun_s_cgroup() -> None:
    n = Node()
    request = StepSignal(job_id=12, step_id=0, signal=KILL, local=True, srun="77:5")
    assert n.handle(StepSignalRequested(request, n.now)) == [SignalLocalStep(request)]


def test_the_server_s_unwanted_parts_end_at_registration() -> None:
    n = Node()
    n.running()
    commands = n.handle(Registered(7, (), n.now, (RunningStep(job_id=12, step_id=3),)))
    assert sent_signals(commands) == [CONT, TERM]
    assert n.part().kill_at == n.now + 7  # the server's KillWait


def test_over_memory_kills_its_tasks_as_out_of_memory() -> None:
    n = Node()
    n.running()
    assert sent_signals(n.handle(StepOverMemory(KEY, n.now))) == [KILL]
    n.exited({2: -9, 3: -9})
    n.collected()
    assert n.part().oom and said(n.collected()) == []  # (collected once)


# -- its own time limit (srun -t) ------------------------------------------------------------


@pytest.mark.parametrize("node_index", [0, 1])
def test_its_time_limit_ends_it_with_slurmstepd_s_line_then_sigkill(node_index: int) -> None:
    n = Node()
    n.running(step_launch(time_limit_seconds=60, step_node_index=node_index))
    assert n.machine.next_deadline() == 1060.0
    assert n.tick(59.9) == []
    commands = n.tick(0.1)
    assert commands[0] == MarkStepTimedOut(KEY)
    (line,) = said(commands)
    assert line.endswith("DUE TO TIME LIMIT ***")
    assert sent_signals(commands) == [CONT, TERM]
    assert n.part().timed_out and n.part().ending
    assert sent_signals(n.tick(10)) == [KILL]  # KillWait later
    n.exited({2: -9, 3: -9})
    # the step's first node says srun's last line, and only it
    forced = "srun: Force Terminated StepId=12.3"
    assert (forced in said(n.collected())) == (node_index == 0)
    (end,) = n.machine.steps.outgoing().ends
    assert end.timed_out


def test_the_time_limit_counts_from_the_keeper_s_start_and_not_while_starting() -> None:
    n = Node()
    n.launch(step_launch(time_limit_seconds=10))
    assert n.machine.next_deadline() is None  # (its artifacts may take a while)
    n.tick(100)
    n.start()
    assert n.machine.next_deadline() == n.now + 10


def test_an_adopted_part_keeps_its_limit_and_a_limit_that_came_only_waits_to_kill() -> None:
    n = Node()
    limited = step_launch(time_limit_seconds=60)
    n.handle(StepAdopted(limited, 950.0, None, None, n.now))
    assert n.machine.next_deadline() == 1010.0  # from when its keeper started
    other = step_launch(step_id=4, time_limit_seconds=60)
    n.handle(StepAdopted(other, 900.0, 990.0, None, n.now))  # its limit came at 990
    part = n.part((12, 0, 4))
    assert part.timed_out and part.ending and part.kill_at == 1000.0  # KillWait 10
    n.handle(StepTasksFound((12, 0, 4), n.now))
    commands = n.tick(0)
    assert said(commands) == [] and sent_signals(commands) == [KILL]  # no second line


# -- srun -K ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kill_on_bad_exit", "ending", "ends", "failed"),
    [
        (True, False, ((2, 0), (3, 4)), (3, 4)),  # the first that failed
        (True, False, ((3, -11), (2, 1)), (3, -11)),  # a signal is a failure
        (True, False, ((2, 0),), None),
        (True, True, ((3, 4),), None),  # already ending: its tasks' deaths are no failure
        (False, False, ((3, 4),), None),
    ],
)
def test_kill_on_bad_exit(
    kill_on_bad_exit: bool, ending: bool, ends: tuple[Any, ...], failed: tuple[int, int] | None
) -> None:
    n = Node()
    n.running(step_launch(kill_on_bad_exit=kill_on_bad_exit))
    if ending:
        n.signal(TERM)
    commands = n.handle(StepTasksEnded(KEY, ends, n.now))
    assert n.part().failed == failed
    if failed is None:
        assert commands == []
        return
    rank, code = failed
    assert commands[0] == MarkStepBadExit(KEY, rank, code)
    assert said(commands)[-1] == "srun: launch/slurm: _step_signal: Terminating StepId=12.3"
    assert [c.rank for c in commands if isinstance(c, WriteStepError)] == [rank]
    assert n.handle(StepTasksEnded(KEY, ((2, 9),), n.now)) == []  # said once
    (bad,) = n.machine.steps.outgoing().bad_exits
    assert (bad.rank, bad.exit_code) == failed
    n.deliver(n.machine.steps.outgoing())
    assert n.machine.steps.outgoing().bad_exits == []  # answered: not again
    # its end does not say the failed task's line twice
    n.exited({rank: code, 5 - rank: 0})
    assert not any(f"task {rank}:" in line for line in said(n.collected()))


# -- what the syncs carry --------------------------------------------------------------------


def test_output_waits_by_offset_until_a_sync_carrying_it_is_answered() -> None:
    n = Node()
    n.running()
    assert n.read(2, b"hello ") == [SyncSoon()]
    n.read(2, b"world\n")
    first = n.machine.steps.outgoing()
    (out,) = first.output
    assert (out.rank, out.offset, base64.b64decode(out.data_b64)) == (2, 0, b"hello world\n")
    assert n.machine.steps.outgoing().output == first.output  # not answered: again
    n.deliver(first)
    n.read(2, b"more")
    (later,) = n.machine.steps.outgoing().output
    assert (later.offset, base64.b64decode(later.data_b64)) == (12, b"more")
    assert not n.machine.steps.outgoing().ends


def test_the_end_goes_only_with_its_last_output() -> None:
    n = Node()
    n.running()
    n.read(3, b"x" * (MAX_SYNC_BYTES + 5))
    n.exited({2: 0, 3: 0})
    n.collected()
    first = n.machine.steps.outgoing()
    assert sum(len(base64.b64decode(o.data_b64)) for o in first.output) == MAX_SYNC_BYTES
    assert first.ends == []  # 5 bytes are left for the next sync
    n.deliver(first)
    second = n.machine.steps.outgoing()
    assert [len(base64.b64decode(o.data_b64)) for o in second.output] == [5]
    assert [e.step_id for e in second.ends] == [3]
    assert n.deliver(second) == [ForgetStep(KEY)]
    assert not n.machine.steps.pending() and n.machine.steps.running() == []


def test_a_read_from_another_offset_is_a_bug() -> None:
    n = Node()
    n.running()
    n.read(2, b"abc")
    with pytest.raises(InvariantViolation):
        n.handle(StepOutputRead(KEY, 2, "stdout", 1, b"bc", n.now))


def test_srun_s_input_goes_to_parts_that_relay_it_until_they_end() -> None:
    n = Node()
    n.running(step_launch(relay_ranks=[2]))
    n.running(step_launch(step_id=4))  # reads none
    given = StepInput(job_id=12, step_id=3, offset=0, data_b64="eA==")
    assert n.handle(StepInputArrived(given, n.now)) == [WriteStepInput(KEY, given)]
    other = given.model_copy(update={"step_id": 4})
    assert n.handle(StepInputArrived(other, n.now)) == []
    assert n.handle(StepFedRead(KEY, ((2, 1),), n.now)) == [SyncSoon()]
    sent = n.machine.steps.outgoing()
    (fed,) = sent.input_fed
    assert (fed.rank, fed.offset, fed.closed) == (2, 1, False)
    n.deliver(sent)
    assert n.machine.steps.outgoing().input_fed == [] and not n.machine.steps.pending()
    n.handle(StepFedRead(KEY, ((2, -1),), n.now))  # its task takes no more
    assert [f.closed for f in n.machine.steps.outgoing().input_fed] == [True]
    n.exited({2: 0, 3: 0})
    n.collected()
    assert n.handle(StepInputArrived(given, n.now)) == []  # ended: it goes nowhere


def test_registration_lists_every_part_held_and_terminals_are_interactive() -> None:
    n = Node()
    n.running(step_launch(pty=[24, 80], relay_ranks=[2]))
    assert n.machine.steps.running() == [RunningStep(job_id=12, step_id=3, attempt=0)]
    assert n.machine.steps.interactive()
    n.exited({2: 0, 3: 0})
    n.collected()
    assert not n.machine.steps.interactive()
    assert len(n.machine.steps.running()) == 1  # until its end is answered


# -- invariants ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda p: p.evolve(exit_code=3),  # an exit code before the end
        lambda p: p.evolve(failed=(2, 1)),  # a -K failure of a step without -K
        lambda p: p.evolve(timed_out=True),  # timed out without a limit
        lambda p: p.evolve(phase=StepPhase.COLLECTING),  # collecting without ends
    ],
)
def test_the_invariants_catch_a_corrupted_part(corrupt: Callable[[StepRecord], StepRecord]) -> None:
    n = Node()
    n.running()
    n.machine.steps.parts[KEY] = corrupt(n.part())
    with pytest.raises(InvariantViolation):
        n.tick(1)


def test_adopting_a_part_twice_is_a_bug() -> None:
    n = Node()
    n.running()
    with pytest.raises(InvariantViolation):
        n.handle(StepAdopted(step_launch(), 0.0, None, None, n.now))
