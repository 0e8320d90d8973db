"""The agent's state machine, driven by events on a virtual clock; no processes."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from hal.agent.events import (
    CancelRequested,
    Command,
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
from hal.agent.records import ExitOutcome, InvariantViolation, JobRecord, Phase
from hal.agent.state import AgentState
from hal.core.clock import VirtualClock
from hal.testing.builders import make_launch
from hal.wire.agent import Cancel, JobReport, Limit, Signal

TERM, KILL, CONT = int(signal.SIGTERM), int(signal.SIGKILL), int(signal.SIGCONT)
USR1 = int(signal.SIGUSR1)


launch = make_launch


class Driver:
    """Feeds events at the virtual clock's time and keeps what came out."""

    def __init__(self, kill_wait: int = 5) -> None:
        self.clock = VirtualClock(1000.0)
        self.machine = AgentState(first_seq=1, kill_wait_seconds=kill_wait)

    def launch(self, job_id: int = 1, **changes: Any) -> list[Command]:
        return self.machine.handle(LaunchRequested(launch(job_id, **changes), self.clock.now()))

    def start(self, job_id: int = 1, pid: int = 100, attempt: int = 0) -> list[Command]:
        return self.machine.handle(ProcessStarted(job_id, attempt, pid, self.clock.now()))

    def run(self, job_id: int = 1, pid: int = 100, **changes: Any) -> None:
        self.launch(job_id, **changes)
        self.start(job_id, pid)

    def exit(self, job_id: int = 1, attempt: int = 0, **outcome: Any) -> list[Command]:
        return self.machine.handle(
            ProcessExited(job_id, attempt, ExitOutcome(**outcome), self.clock.now())
        )

    def tick(self, seconds: float) -> list[Command]:
        self.clock.advance(seconds)
        return self.machine.handle(Tick(self.clock.now()))

    def cancel(self, job_id: int = 1, **changes: Any) -> list[Command]:
        return self.machine.handle(
            CancelRequested(Cancel(job_id=job_id, **changes), self.clock.now())
        )


def signals(commands: list[Command]) -> list[tuple[int, bool]]:
    return [(c.signum, c.group) for c in commands if isinstance(c, SignalJob)]


def reports(commands: list[Command]) -> list[JobReport]:
    return [c.report for c in commands if isinstance(c, SendReport)]


def final(commands: list[Command]) -> tuple[str, int, int]:
    (report,) = reports(commands)
    return report.state, report.exit_code, report.exit_signal


def test_launch_spawns_and_start_reports_started() -> None:
    d = Driver()
    commands = d.launch()
    assert [type(c) for c in commands] == [SpawnJob]
    assert d.machine.jobs[1].phase is Phase.LAUNCHING
    started = reports(d.start(pid=4242))
    assert [(r.kind, r.pid, r.seq) for r in started] == [("started", 4242, 1)]
    assert d.machine.jobs[1].phase is Phase.RUNNING
    assert [(r.job_id, r.pid) for r in d.machine.running()] == [(1, 4242)]


def test_a_plain_start_is_not_persisted_and_the_record_can_be_rebuilt() -> None:
    """The supervisor's ``started`` file holds a plain start; ``JobRecord.start`` on the
    persisted LAUNCHING record rebuilds exactly the record the first agent had."""
    d = Driver()
    (spawn,) = d.launch(time_limit_seconds=60)
    assert isinstance(spawn, SpawnJob) and spawn.record.plain_start
    commands = d.start(pid=4242)
    assert not any(isinstance(c, PersistRecord) for c in commands)
    assert spawn.record.start(4242, d.clock.now()) == d.machine.jobs[1]


def test_a_start_that_delivers_pending_work_is_persisted() -> None:
    d = Driver()
    d.launch()
    d.cancel(kill_wait_seconds=3)
    assert not d.machine.jobs[1].plain_start
    persisted = [c.record for c in d.start() if isinstance(c, PersistRecord)]
    assert [(r.phase, r.end_state) for r in persisted] == [(Phase.STOPPING, "CANCELLED")]


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ({"exit_code": 0}, ("COMPLETED", 0, 0)),
        ({"exit_code": 3}, ("FAILED", 3, 0)),
        ({"exit_signal": 9}, ("FAILED", 0, 9)),
        # Slurm's SIG_OOM (253) as a wait status: 0:125, whatever the script exited with
        ({"exit_code": 137, "oom": True}, ("OUT_OF_MEMORY", 0, 125)),
        ({"exit_signal": 9, "oom": True}, ("OUT_OF_MEMORY", 0, 125)),
        ({"exit_code": 0, "oom": True}, ("OUT_OF_MEMORY", 0, 125)),
        ({"lost": True}, ("NODE_FAIL", 0, 0)),
    ],
)
def test_final_state_from_exit(outcome: dict[str, Any], expected: tuple[str, int, int]) -> None:
    d = Driver()
    d.run()
    assert final(d.exit(**outcome)) == expected
    assert not d.machine.jobs


def test_a_lost_supervisor_keeps_the_stop_hal_had_begun() -> None:
    """The supervisor dies while HAL cancels the job: it ends CANCELLED as asked, not
    NODE_FAIL, which the server would requeue."""
    d = Driver()
    d.run()
    d.cancel(kill_wait_seconds=30)
    assert final(d.exit(lost=True)) == ("CANCELLED", 0, 0)


def test_time_limit_sends_term_then_kill_after_kill_wait() -> None:
    d = Driver(kill_wait=5)
    d.run(time_limit_seconds=60)
    assert d.machine.next_deadline() == d.clock.now() + 60
    assert signals(d.tick(59.9)) == []
    assert signals(d.tick(0.1)) == [(CONT, True), (TERM, True)]
    assert d.machine.jobs[1].phase is Phase.STOPPING
    assert signals(d.tick(4.9)) == []
    assert signals(d.tick(0.1)) == [(KILL, True)]
    assert signals(d.tick(100)) == []  # SIGKILL once
    assert final(d.exit(exit_signal=9)) == ("TIMEOUT", 0, 9)


def test_job_that_ends_on_sigterm_is_timeout_0_15() -> None:
    d = Driver()
    d.run(time_limit_seconds=10)
    d.tick(10)
    (report,) = reports(d.exit(exit_signal=15))
    assert (report.state, report.exit_signal) == ("TIMEOUT", 15)
    assert "time limit of 10s" in report.message


def test_unlimited_job_has_no_deadline() -> None:
    d = Driver()
    d.run(time_limit_seconds=0)
    assert d.machine.next_deadline() is None
    assert signals(d.tick(1e9)) == []


def test_batch_signal_goes_to_the_shell_before_the_limit() -> None:
    d = Driver()
    d.run(time_limit_seconds=100, signal="B:USR1@30")
    assert d.machine.next_deadline() == d.clock.now() + 70
    assert signals(d.tick(70)) == [(USR1, False)]
    assert d.machine.next_deadline() == d.clock.now() + 30
    assert signals(d.tick(10)) == []
    assert final(d.exit(exit_code=0)) == ("COMPLETED", 0, 0)


def test_batch_signal_longer_than_the_limit_is_sent_at_start() -> None:
    d = Driver()
    d.launch(time_limit_seconds=10, signal="B:USR1@60")
    assert signals(d.start()) == [(USR1, False)]


def test_a_signal_without_b_is_not_the_agents_to_send() -> None:
    """``--signal=USR1@30`` goes to the job's steps, not its batch shell, as Slurm's: the
    server sends it (hal.state.step_signal); the agent sent it to the whole group."""
    d = Driver()
    d.run(time_limit_seconds=100, signal="USR1@30")
    # nothing due before the time limit (a past signal time would wake the agent at once)
    assert d.machine.next_deadline() == d.clock.now() + 100
    assert signals(d.tick(75)) == []


def test_a_job_killed_by_a_signal_hal_sent_fails_unless_it_was_sigkill() -> None:
    """As Slurm 22.05.8's: a job that dies of `scancel -f -s USR1` is FAILED 0:10 (HAL
    said CANCELLED), of `scancel -s KILL` CANCELLED."""
    for signum, state in ((USR1, "FAILED"), (KILL, "CANCELLED")):
        d = Driver()
        d.run()
        sent = d.machine.handle(SignalRequested(Signal(job_id=1, signal=signum), d.clock.now()))
        assert signals(sent) == [(signum, True)]
        assert final(d.exit(exit_signal=signum)) == (state, 0, signum)


def test_bad_signal_spec_fails_the_launch() -> None:
    d = Driver()
    (report,) = reports(d.launch(signal="B:NOPE@10"))
    assert report.kind == "launch_failed" and "NOPE" in report.message
    assert not d.machine.jobs


def test_cancel_uses_its_own_grace_and_state() -> None:
    d = Driver(kill_wait=30)
    d.run()
    assert signals(d.cancel(state="PREEMPTED", kill_wait_seconds=2)) == [(CONT, True), (TERM, True)]
    assert signals(d.tick(2)) == [(KILL, True)]
    assert final(d.exit(exit_code=0)) == ("PREEMPTED", 0, 0)


def test_cancel_with_zero_grace_kills_at_once() -> None:
    d = Driver()
    d.run()
    assert signals(d.cancel(kill_wait_seconds=0)) == [(CONT, True), (TERM, True), (KILL, True)]
    assert d.machine.next_deadline() is None


def test_cancel_after_timeout_keeps_timeout_but_shortens_the_grace() -> None:
    d = Driver(kill_wait=30)
    d.run(time_limit_seconds=10)
    d.tick(10)
    assert signals(d.cancel(kill_wait_seconds=1)) == []
    assert signals(d.tick(1)) == [(KILL, True)]
    assert final(d.exit(exit_signal=9))[0] == "TIMEOUT"


def told(commands: list[Command]) -> list[tuple[int, str, float]]:
    return [(c.job_id, c.why, c.time) for c in commands if isinstance(c, TellJob)]


def test_a_cancelled_or_timed_out_job_is_told_why_once() -> None:
    """slurmstepd's "*** JOB N ON node CANCELLED AT T [DUE TO TIME LIMIT] ***" line, as
    Slurm 22.05.8 writes it (docs/slurm-checks.md): once, when the job is signalled; a
    preemption or requeue (not checked against Slurm) writes none."""
    d = Driver()
    d.run(1, time_limit_seconds=10)
    d.run(2, pid=200)
    d.run(3, pid=300)
    assert told(d.tick(10)) == [(1, "DUE TO TIME LIMIT", 1010.0)]
    assert told(d.cancel(1)) == []  # already ending
    assert told(d.cancel(2)) == [(2, "", 1010.0)]
    assert told(d.cancel(3, state="PREEMPTED")) == told(d.cancel(3, state="PENDING")) == []


def test_the_supervisor_is_told_when_a_stopping_jobs_sigkill_is_due() -> None:
    """Before its SIGTERM (its batch shell may end on it at once), so that what the shell
    leaves behind has KillWait too; not for a stop without a grace (SIGKILL at once)."""
    d = Driver(kill_wait=30)
    d.run(1, time_limit_seconds=10)
    d.run(2, pid=200)
    commands = d.tick(10)
    marks = [i for i, c in enumerate(commands) if isinstance(c, MarkStopping)]
    first_signal = next(i for i, c in enumerate(commands) if isinstance(c, SignalJob))
    assert len(marks) == 1 and marks[0] < first_signal, commands
    mark = commands[marks[0]]
    assert isinstance(mark, MarkStopping) and (mark.job_id, mark.kill_at) == (1, 1040.0)
    assert not [c for c in d.cancel(2, kill_wait_seconds=0) if isinstance(c, MarkStopping)]


def test_cancel_while_launching_is_carried_out_at_start() -> None:
    d = Driver()
    d.launch()
    assert signals(d.cancel(kill_wait_seconds=3)) == []
    commands = d.start()
    assert [r.kind for r in reports(commands)] == ["started"]
    assert signals(commands) == [(CONT, True), (TERM, True)]
    assert d.machine.jobs[1].phase is Phase.STOPPING
    assert final(d.exit(exit_signal=15)) == ("CANCELLED", 0, 15)


def test_signal_while_launching_is_delivered_at_start() -> None:
    d = Driver()
    d.launch()
    d.machine.handle(SignalRequested(Signal(job_id=1, signal=USR1, batch_only=True), 0))
    assert signals(d.start()) == [(USR1, False)]


def test_cancel_that_overtakes_its_launch_wins() -> None:
    """Two syncs in flight may deliver a Cancel before the Launch it belongs to; or the
    Launch was lost (a node that restarted). The attempt ends at once, before it starts,
    and its Launch, if it comes, is ignored."""
    d = Driver()
    cancelled = reports(d.cancel(job_id=7, attempt=0))
    assert [(r.kind, r.attempt, r.state) for r in cancelled] == [("finished", 0, "CANCELLED")]
    assert cancelled[0].message == "cancelled before it started"
    assert d.launch(7) == []
    assert d.cancel(job_id=8) == []  # no attempt named (an older server), nothing here


def test_a_late_cancel_of_an_ended_attempt_leaves_the_next_one_alone() -> None:
    """The job ended by itself as a requeue's Cancel was sent: the Cancel arrives after
    the finish report was acknowledged. The requeued attempt must still run."""
    d = Driver()
    d.run()
    (done,) = reports(d.exit())
    d.machine.handle(ReportsAcked(done.seq, d.clock.now()))
    assert d.cancel(state="PENDING", attempt=0) == []
    assert any(isinstance(c, SpawnJob) for c in d.launch(attempt=1))
    assert [r.kind for r in reports(d.start(attempt=1))] == ["started"]


def test_repeated_launch_and_an_older_attempt_are_ignored() -> None:
    d = Driver()
    d.launch(attempt=1)
    d.start(attempt=1)
    assert d.launch(attempt=1) == []
    assert d.launch(attempt=0) == []
    assert d.machine.jobs[1].attempt == 1


def test_a_newer_attempt_stops_the_old_one_and_starts_when_it_has_ended() -> None:
    """The server requeued the job while this node was silent and placed attempt 1 here
    again before attempt 0's processes were gone: no launch failure, a clean hand-over."""
    d = Driver(kill_wait=5)
    d.run()
    commands = d.launch(attempt=1)
    assert signals(commands) == [(CONT, True), (TERM, True)]
    assert not any(isinstance(c, SpawnJob) for c in commands) and reports(commands) == []
    assert d.machine.jobs[1].attempt == 0  # still the old one, being stopped
    ended = d.exit(attempt=0, exit_signal=TERM)
    assert [(r.kind, r.attempt) for r in reports(ended)] == [("finished", 0)]
    (spawn,) = [c for c in ended if isinstance(c, SpawnJob)]
    assert (spawn.launch.attempt, d.machine.jobs[1].attempt) == (1, 1)


def test_cancel_of_a_waiting_attempt_ends_it_before_it_starts() -> None:
    d = Driver()
    d.run()
    d.launch(attempt=1)
    cancelled = reports(d.cancel(state="CANCELLED", attempt=1))
    assert [(r.attempt, r.kind, r.state) for r in cancelled] == [(1, "finished", "CANCELLED")]
    ended = d.exit(attempt=0, exit_signal=TERM)
    assert not any(isinstance(c, SpawnJob) for c in ended)
    assert [(r.attempt, r.kind, r.state) for r in reports(ended)] == [(0, "finished", "CANCELLED")]
    assert d.cancel(state="CANCELLED", attempt=0) == []  # an older attempt's: ended


def test_launch_of_a_finished_attempt_is_not_run_again() -> None:
    d = Driver()
    d.run()
    d.exit()
    assert d.launch() == []


def test_stale_events_of_another_attempt_are_ignored() -> None:
    d = Driver()
    d.run()
    assert d.exit(attempt=5) == []
    assert d.machine.handle(LaunchFailed(1, 5, "x", 0)) == []
    assert 1 in d.machine.jobs


def test_launch_failed_is_reported_and_forgotten_after_ack() -> None:
    d = Driver()
    d.launch()
    (report,) = reports(d.machine.handle(LaunchFailed(1, 0, "no such dir", d.clock.now())))
    assert (report.kind, report.message) == ("launch_failed", "no such dir")
    assert d.machine.handle(ReportsAcked(report.seq, 0)) == [ForgetJob(1, 0)]


def test_outbox_keeps_reports_until_acked_and_then_forgets_the_job() -> None:
    d = Driver()
    d.run()
    (finished,) = reports(d.exit(exit_code=1))
    assert [r.seq for r in d.machine.unacked_reports()] == [1, 2]
    assert d.machine.handle(ReportsAcked(1, 0)) == []
    assert [r.seq for r in d.machine.unacked_reports()] == [2]
    assert d.machine.handle(ReportsAcked(0, 0)) == []  # an older ack changes nothing
    assert d.machine.handle(ReportsAcked(finished.seq, 0)) == [ForgetJob(1, 0)]
    assert d.machine.unacked_reports() == []


def test_ack_beyond_what_was_sent_is_clamped() -> None:
    d = Driver()
    d.run()
    d.machine.handle(ReportsAcked(10**15, 0))
    assert d.machine.acked_seq == d.machine.next_seq - 1
    (later,) = reports(d.exit())
    assert later.seq > d.machine.acked_seq


def test_registered_sets_kill_wait_and_drops_unwanted_jobs() -> None:
    d = Driver(kill_wait=30)
    d.run(1, pid=11, time_limit_seconds=100)
    d.run(2, pid=22)
    commands = d.machine.handle(Registered(kill_wait_seconds=3, kill=(2, 99), time=d.clock.now()))
    assert [(c.job_id, c.signum) for c in commands if isinstance(c, SignalJob)] == [
        (2, CONT),
        (2, TERM),
    ]
    assert d.machine.kill_wait_seconds == 3
    assert d.machine.jobs[2].kill_at == d.clock.now() + 3


def test_adopted_job_keeps_its_stop_in_progress() -> None:
    """Restart during a cancel: SIGKILL still comes at the recorded time, and the end is
    CANCELLED, not a FAILED job killed by a signal."""
    d = Driver()
    record = JobRecord(
        job_id=5,
        attempt=0,
        phase=Phase.STOPPING,
        pid=55,
        start_time=900.0,
        end_state="CANCELLED",
        kill_wait_seconds=10,
        kill_at=1005.0,
    )
    assert d.machine.handle(JobAdopted(record, d.clock.now())) == []
    assert signals(d.tick(5)) == [(KILL, True)]
    assert final(d.exit(5, exit_signal=9)) == ("CANCELLED", 0, 9)


def test_adopted_job_past_its_limit_is_stopped_at_once() -> None:
    d = Driver()
    record = JobRecord(
        job_id=5, attempt=0, phase=Phase.RUNNING, pid=55, start_time=0.0, time_limit_seconds=10
    )
    commands = d.machine.handle(JobAdopted(record, d.clock.now()))
    assert signals(commands) == [(CONT, True), (TERM, True)]
    assert any(isinstance(c, PersistRecord) for c in commands)


def test_adopting_twice_is_a_bug() -> None:
    d = Driver()
    d.run()
    with pytest.raises(InvariantViolation):
        d.machine.handle(JobAdopted(JobRecord(job_id=1, attempt=0), 0))


def test_invariants_catch_a_corrupted_record() -> None:
    d = Driver()
    d.run()
    d.machine.jobs[1] = d.machine.jobs[1].evolve(pid=0)
    with pytest.raises(InvariantViolation):
        d.tick(1)


def test_records_round_trip_through_json() -> None:
    d = Driver()
    d.run(time_limit_seconds=100, signal="B:USR1@30")
    d.tick(80)
    record = d.machine.jobs[1]
    assert record.signal_sent and record.hal_signals == (USR1,)
    assert JobRecord.from_json(record.to_json()) == record


def test_many_jobs_keep_increasing_seqs() -> None:
    d = Driver()
    for job in range(1, 51):
        d.run(job, pid=1000 + job, time_limit_seconds=job)
    for _ in range(60):
        d.tick(1)
    for job in range(1, 51):
        d.exit(job, exit_signal=15)
    seqs = [r.seq for r in d.machine.unacked_reports()]
    assert seqs == sorted(seqs) and len(set(seqs)) == 100
    states = {r.state for r in d.machine.unacked_reports() if r.kind == "finished"}
    assert states == {"TIMEOUT"}


def test_suspended_time_does_not_count_toward_the_limit() -> None:
    d = Driver(kill_wait=5)
    d.run(time_limit_seconds=60)
    d.tick(20)
    stop = Signal(job_id=1, signal=signal.SIGSTOP)
    assert signals(d.machine.handle(SignalRequested(stop, d.clock.now()))) == [
        (signal.SIGSTOP, True)
    ]
    assert d.machine.next_deadline() is None  # the clock is stopped with the job
    assert signals(d.tick(500)) == []
    cont = Signal(job_id=1, signal=signal.SIGCONT)
    d.machine.handle(SignalRequested(cont, d.clock.now()))
    assert d.machine.jobs[1].suspended_seconds == 500
    assert d.machine.next_deadline() == d.clock.now() + 40  # 20 s run, 40 s left
    assert signals(d.tick(39.9)) == []
    assert signals(d.tick(0.1)) == [(CONT, True), (TERM, True)]


def test_suspension_survives_an_agent_restart() -> None:
    record = JobRecord(
        1, 0, Phase.RUNNING, pid=5, start_time=10.0, time_limit_seconds=60, suspended_at=30.0
    )
    again = JobRecord.from_json(record.to_json())
    assert again == record and again.deadline is None
    resumed = again.evolve(suspended_at=0.0, suspended_seconds=100.0)
    assert resumed.deadline == 170.0


def test_a_job_suspended_while_launching_stops_its_limit_clock_at_start() -> None:
    d = Driver(kill_wait=5)
    d.launch(time_limit_seconds=60)
    stop = Signal(job_id=1, signal=signal.SIGSTOP)
    d.machine.handle(SignalRequested(stop, d.clock.now()))  # queued: no process yet
    assert signals(d.start()) == [(signal.SIGSTOP, True)]
    assert d.machine.jobs[1].suspended_at == d.clock.now()
    assert d.machine.next_deadline() is None
    assert signals(d.tick(500)) == []
    cont = Signal(job_id=1, signal=signal.SIGCONT)
    d.machine.handle(SignalRequested(cont, d.clock.now()))
    assert d.machine.next_deadline() == d.clock.now() + 60  # none of its limit used


def test_a_new_time_limit_counts_from_the_start() -> None:
    d = Driver(kill_wait=5)
    d.run(time_limit_seconds=60)
    d.tick(30)

    def limit(seconds: int, attempt: int = 0) -> list[Command]:
        new = Limit(job_id=1, attempt=attempt, time_limit_seconds=seconds)
        return d.machine.handle(LimitRequested(new, d.clock.now()))

    assert limit(600, attempt=3) == []  # another attempt's
    limit(600)  # raised: runs past 60 s
    assert d.machine.next_deadline() == d.clock.now() - 30 + 600
    assert signals(d.tick(100)) == []
    assert signals(limit(100)) == [(CONT, True), (TERM, True)]  # lowered below its 130 s
    assert final(d.exit(exit_signal=TERM))[0] == "TIMEOUT"
