"""A pass decided in a forked process (``hal.scheduler.forked``) decides what the same
pass on the caller's thread decides, sends its forecast after its plan, brings back the
predictions it pinned, holds the plugins' locks across the fork, and fails clearly."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import resource
import signal
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from blocked_head import blocked_head

from hal.bench.sched_pass import build_workload
from hal.core.states import JobState
from hal.predict import SharedPredictor
from hal.predict.pinned import _MISSING, PinnedPredictor, PinsChanges
from hal.predict.registry import planning_predictor
from hal.scheduler.forked import ForkedScheduler, PassProcessFailed
from hal.scheduler.framework.scheduler import PassResult, Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import make_job

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")


def _decisions(result: PassResult) -> tuple[Any, ...]:
    return (
        result.plan,
        result.looked,
        dict(result.rejections),
        dict(result.reservations),
        result.complete,
        result.capped,
        None if result.backfill is None else (result.backfill.considered, result.backfill.started),
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_a_forked_pass_decides_what_the_pass_on_the_thread_decides(seed: int) -> None:
    workload = build_workload(2_000, 200, seed=seed)
    snap = workload.snapshot()
    here = build_scheduler().run_pass(snap)
    forked = ForkedScheduler(build_scheduler())
    there = forked.run_pass(snap)
    assert _decisions(there) == _decisions(here)
    assert there.plan.placements  # (a pass that decides something)
    assert there.process is not None and here.process is None
    assert there.process.cpu_s > 0 and there.process.fork_s > 0 and there.process.load_s > 0
    # (the simulator's, holding the whole pass, and the verdicts the server only counts:
    # not sent)
    assert there.settled is None and there.statuses == {}
    assert there.looked == len(here.statuses) > 0
    forked.close()  # (its forecast: not asked here)
    bounded = forked.run_pass(snap, backfill=False, depth=50, max_starts=10)
    alone = build_scheduler().run_pass(snap, backfill=False, depth=50, max_starts=10)
    assert _decisions(bounded) == _decisions(alone)


def _whole_forecast(forked: ForkedScheduler, plan: Plan) -> list[PendingUpdate]:
    got: list[PendingUpdate] = []
    while forked.forecasting:
        got.extend(forked.forecast(plan))
    return got


@pytest.mark.parametrize("slice_s", [0.0, 0.02])
def test_the_forecast_comes_after_the_plan_in_slices(slice_s: float) -> None:
    """The child goes on with the forecast after its plan, a slice at a time; the slices
    together are the whole forecast, and the passes after it (no backfill stage) name
    its jobs until it is done."""
    workload = build_workload(3_000, 100, seed=1)
    snap = workload.snapshot()
    scheduler = _sliced(slice_s)
    here = scheduler.run_pass(snap)
    assert here.plan.forecasting  # (jobs backfill gave no reservation)
    expected = list(scheduler.forecast(here.plan))
    forked = ForkedScheduler(_sliced(slice_s))
    there = forked.run_pass(snap)
    assert there.plan.forecasting == here.plan.forecasting == forked.forecasting
    later = forked.run_pass(snap, backfill=False, depth=10)
    assert later.plan.forecasting == there.plan.forecasting  # (asked for the rest)
    other = dataclasses.replace(there.plan, forecasting=(1,))
    assert forked.forecast(other) == ()  # not the forecaster's
    assert _whole_forecast(forked, there.plan) == expected
    assert forked.forecast(there.plan) == ()  # given once
    assert not forked.run_pass(snap, backfill=False, depth=10).plan.forecasting
    _no_children()


def test_a_pass_with_the_backfill_stage_due_stops_the_last_forecast() -> None:
    snap = build_workload(3_000, 100, seed=1).snapshot()
    forked = ForkedScheduler(_sliced(0.001))
    first = forked.run_pass(snap)
    assert forked.forecasting == first.plan.forecasting
    second = forked.run_pass(snap)  # (backfill due: its own forecast)
    assert forked.forecasting == second.plan.forecasting
    assert _whole_forecast(forked, second.plan)
    assert forked.forecast(first.plan) == ()
    _no_children()


def test_a_small_pass_is_decided_on_the_thread() -> None:
    forked = ForkedScheduler(build_scheduler(), fork_from=10)
    small = forked.run_pass(blocked_head())
    assert small.process is None and small.statuses  # (here: every verdict)
    big = build_workload(200, 20, seed=1).snapshot()
    assert forked.run_pass(big).process is not None


def _sliced(slice_s: float) -> Scheduler:
    profile = default_profile()
    profile["plugin_args"]["backfill"] = {"yield_interval_s": slice_s}  # type: ignore[index]
    return build_scheduler(profile)


def _no_children() -> None:
    """No child of this process is left, running or unreaped."""
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


@pytest.fixture(autouse=True)
def _reaped() -> Iterator[None]:
    """Each test leaves no child to the next (a forecast not asked for is killed)."""
    yield
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid():
                os.kill(int(stat_file.parent.name), signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, 0):
            pass


def _shared() -> tuple[SharedPredictor, PinnedPredictor]:
    shared = SharedPredictor(planning_predictor("avg2"))
    pinned = shared._pinned
    assert pinned is not None
    return shared, pinned


def test_the_predictions_a_forked_pass_pins_come_back() -> None:
    """What the pass pins and remembers is what the same pass on the thread does."""
    kept = []
    for fork in (False, True):
        shared, pinned = _shared()
        scheduler = build_scheduler(default_profile(), default_registry(predictor=shared))
        result = (ForkedScheduler(scheduler) if fork else scheduler).run_pass(blocked_head())
        assert result.backfill is not None
        kept.append((pinned._pinned, pinned._pending, pinned._first))
    assert set(kept[1][0]) == {1, 2}  # the running jobs
    assert kept[1] == kept[0]


def test_a_job_forgotten_while_the_pass_ran_is_not_pinned_again() -> None:
    _, pinned = _shared()
    running = make_job(1).limit(100).running_on("n0001", start=990).build()
    other = make_job(2).limit(100).running_on("n0001", start=990).build()
    token = pinned.fork_began()  # (the parent, at the fork)
    mark = pinned.pass_mark()  # (the child ...)
    pinned.predict(running)
    pinned.predict(other)
    changes = pinned.pass_changes(mark)
    pinned.forget(1)  # (... and the parent, meanwhile: job 1 ended)
    pinned._pinned.clear()
    pinned.adopt(changes, token)
    assert set(pinned._pinned) == {2}
    pinned.fork_ended(token)
    assert not pinned._watching


def test_an_older_pass_s_changes_do_not_undo_a_later_one_s() -> None:
    """A forecaster that ends after a later pass: what it found is no longer there, so
    its change is not put back; a job forgotten since its own fork (not only since the
    latest) stays forgotten."""
    _, pinned = _shared()
    waiting = make_job(2).limit(100).build()
    ended = make_job(1).limit(100).running_on("n0001", start=990).build()
    older = pinned.fork_began()  # pass A forked
    mark = pinned.pass_mark()
    pinned._pending[2] = 100.0  # (A's child predicts job 2 ...)
    pinned.predict(ended)  # (... and pins job 1)
    changes_a = pinned.pass_changes(mark)
    pinned._pending.clear()
    pinned._pinned.clear()  # (the parent had neither)
    pinned.forget(1)  # job 1 ended
    later = pinned.fork_began()  # pass B forked, its child predicted job 2 anew: adopted
    pinned.adopt(_changes(2, 55.0), later)
    assert pinned._pending == {2: 55.0}
    pinned.adopt(changes_a, older)  # A's forecaster ends now
    assert pinned._pending == {2: 55.0}  # B's, not A's older answer
    assert 1 not in pinned._pinned  # forgotten since A began, though before B
    assert pinned.predict(waiting) > 0


def _changes(job_id: int, value: float) -> PinsChanges:
    """A pass's changes that predicted ``job_id`` afresh as ``value`` (nothing kept)."""
    return ({}, {job_id: (_MISSING, value)}, {})


def test_the_predictor_held_by_its_trainer_is_waited_for_not_inherited_taken() -> None:
    """Forked while another thread held the predictor, the child would find its lock
    taken for ever: the fork waits for it instead."""
    shared, _ = _shared()
    forked = ForkedScheduler(build_scheduler(default_profile(), default_registry(predictor=shared)))
    taken, release = threading.Event(), threading.Event()

    def trainer() -> None:
        with shared.lock:
            taken.set()
            release.wait(5)

    thread = threading.Thread(target=trainer)
    thread.start()
    taken.wait(5)
    threading.Timer(0.3, release.set).start()
    began = time.monotonic()
    forked.timeout_s = 20
    result = forked.run_pass(blocked_head())
    thread.join()
    assert time.monotonic() - began >= 0.25  # waited for the trainer
    assert {p.job_id for p in result.plan.placements} == {12}


class _Odd(Scheduler):
    """A scheduler whose pass fails, or sleeps, or names the sockets its process
    holds, before deciding."""

    what = ""

    def run_pass(self, snapshot: ClusterSnapshot, **options: Any) -> PassResult:
        if self.what == "raise":
            raise ValueError("a plugin failed")
        if self.what == "sleep":
            time.sleep(30)
        if self.what == "sockets":
            held = [fd for fd in map(int, os.listdir("/proc/self/fd")) if _is_socket(fd)]
            if held:
                raise RuntimeError(f"sockets held: {held}")
        return super().run_pass(snapshot, **options)


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


def _with(what: str) -> Scheduler:
    odd = _Odd(build_scheduler().profile)
    odd.what = what
    return odd


def test_a_pass_that_raises_in_its_process_fails_with_its_traceback() -> None:
    forked = ForkedScheduler(_with("raise"))
    with pytest.raises(PassProcessFailed, match="a plugin failed"):
        forked.run_pass(blocked_head())
    forked.use(build_scheduler())
    assert forked.run_pass(blocked_head()).plan.placements  # the next pass goes on


def test_a_pass_past_its_time_is_killed() -> None:
    forked = ForkedScheduler(_with("sleep"), timeout_s=0.5)
    began = time.monotonic()
    with pytest.raises(PassProcessFailed, match=r"ran past 0\.5 s"):
        forked.run_pass(blocked_head())
    assert time.monotonic() - began < 10
    _no_children()  # killed and reaped


def test_the_pass_s_process_holds_none_of_the_server_s_sockets() -> None:
    """A killed leader's database sessions (and its lock) must end with it, not when
    its pass's process ends."""
    left, right = socket.socketpair()
    try:
        forked = ForkedScheduler(_with("sockets"))
        assert forked.run_pass(blocked_head()).plan.placements
    finally:
        left.close()
        right.close()


def test_a_server_with_a_thousand_sockets_open_still_hears_its_pass() -> None:
    """10,000 agents' syncs hold more than 1,024 descriptors: the pass's pipe is past
    what ``select`` takes (the first live run of the server failed every pass so)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} descriptors, fewer than the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.dup(0))
        result = ForkedScheduler(build_scheduler()).run_pass(blocked_head())
        assert {p.job_id for p in result.plan.placements} == {12}
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _next(snap: ClusterSnapshot, plan: Plan, ended: int) -> ClusterSnapshot:
    """The snapshot a second later: the plan's placements running, the first ``ended``
    running jobs gone."""
    placed = {p.job_id: p.allocation for p in plan.placements}
    started = [
        j.evolve(state=JobState.RUNNING, allocation=placed[j.id], start_time=snap.now)
        for j in snap.pending
        if j.id in placed
    ]
    return dataclasses.replace(
        snap,
        revision=snap.revision + 1,
        now=snap.now + 1,
        pending=tuple(j for j in snap.pending if j.id not in placed),
        running=(*snap.running[ended:], *started),
    )


def _unforecast(result: PassResult) -> PassResult:
    return dataclasses.replace(result, plan=dataclasses.replace(result.plan, forecasting=()))


def _ledger(scheduler: Scheduler) -> dict[int, tuple[Any, ...]]:
    """The ledger's running jobs: each one's rows (node, CPUs, memory, GPUs), whether
    exclusive, and its job object (by identity). Where the slots lie may differ: a job
    placed by a forked pass has its rows written again when it runs (the parent never
    saw the allocation the child placed it with)."""
    ledger = scheduler.framework.releases
    columns = ledger._columns()
    return {
        jid: (tuple(c[first : first + count].tolist() for c in columns), excl, id(job))
        for jid, (_, first, count, job, excl) in ledger._jobs.items()
        if job is not None
    }


def test_the_running_jobs_rows_a_forked_pass_wrote_come_back() -> None:
    """Pass after pass, with jobs starting and ending between them, the parent's ledger
    after each forked pass is the ledger the same pass on the thread leaves, so the
    next child starts warm; the decisions are the same all along."""
    snap = build_workload(3_000, 300, seed=2).snapshot()
    forked = ForkedScheduler(build_scheduler())
    here = build_scheduler()
    for step in range(4):
        there = forked.run_pass(snap, backfill=step % 2 == 0)
        alone = here.run_pass(snap, backfill=step % 2 == 0)
        forked.close()
        # (the forecasts aside: the thread's is carried into the next pass, the child's
        # is stopped here, not asked for)
        assert _decisions(_unforecast(there)) == _decisions(_unforecast(alone))
        assert _ledger(forked.scheduler) == _ledger(here)
        assert len(forked.scheduler.framework.releases) > 0
        snap = _next(snap, alone.plan, ended=25)


def test_auto_passes_on_the_thread_and_forked_carry_one_forecast() -> None:
    """``auto``: a pass on the thread that backfilled, then a forked one that did, then one
    on the thread that did not: the last plan names the forked pass's forecast (not the
    thread's older one), and gets it whole: the forecast of the forked pass's profile
    and verdicts (the thread's takes the later pass's verdicts in: ADR 0031)."""
    snap = build_workload(3_000, 100, seed=1).snapshot()
    alone, witness = _sliced(0.02), _sliced(0.02)
    forked = ForkedScheduler(_sliced(0.02))
    plans: list[tuple[Plan, Plan]] = []
    expected: list[PendingUpdate] = []
    for fork, backfill in ((False, True), (True, True), (False, False)):
        forked.fork_from = 0 if fork else 10**9
        there = forked.run_pass(snap, backfill=backfill)
        here = alone.run_pass(snap, backfill=backfill)
        assert (there.process is not None) is fork
        plans.append((there.plan, here.plan))
        if backfill:  # (the forked pass's forecast, worked out right after it)
            expected = list(witness.forecast(witness.run_pass(snap, backfill=True).plan))
        snap = _next(snap, here.plan, ended=40)
    last, own = plans[-1]
    assert plans[0][1].forecasting != plans[1][1].forecasting  # (two forecasts)
    assert last.forecasting == own.forecasting == plans[1][1].forecasting
    assert _whole_forecast(forked, last) == expected


def test_a_pass_that_cannot_be_forked_is_decided_on_the_thread(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    forked = ForkedScheduler(build_scheduler())
    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fork", no_fork)
    with caplog.at_level(logging.WARNING, logger="hal.scheduler.forked"):
        result = forked.run_pass(blocked_head())
    assert result.process is None and {p.job_id for p in result.plan.placements} == {12}
    assert "could not be forked" in caplog.text
    assert len(os.listdir("/proc/self/fd")) == before  # (the pipe closed)


def _kept(scheduler: Scheduler) -> dict[int, tuple[Any, ...]]:
    """What ``pre_filter`` keeps, by job id: its inputs (the spec by identity), the names
    of the PreFilter calls kept and the placement key."""
    return {
        jid: ((id(inputs[0]), *inputs[1:]), tuple(name for name, _ in calls), key)
        for jid, (inputs, calls, key) in scheduler.framework._own.items()
    }


def test_the_prefilter_calls_a_forked_pass_kept_come_back() -> None:
    """Pass after pass, with jobs starting and ending between them, full and bounded
    (``default_queue_depth``'s), the parent keeps for the waiting jobs the PreFilter calls
    the same pass on the thread keeps, with the parent's own calls; the next child asks
    them of no job it was handed them for (its entries are the parent's, unchanged); the
    decisions are the same all along."""
    snap = build_workload(3_000, 300, seed=2).snapshot()
    forked = ForkedScheduler(build_scheduler())
    here = build_scheduler()
    before: dict[int, Any] = {}
    for step in range(5):
        options: dict[str, Any] = {"backfill": step % 2 == 0}
        if step == 3:
            options = {"backfill": False, "depth": 100}
        there = forked.run_pass(snap, **options)
        alone = here.run_pass(snap, **options)
        forked.close()
        assert _decisions(_unforecast(there)) == _decisions(_unforecast(alone))
        kept = forked.scheduler.framework._own
        assert _kept(forked.scheduler) == _kept(here)
        assert len(kept) > 1_000
        calls = forked.scheduler.framework._pre_filter_calls
        assert all(
            any(call is c for c in calls) for _, picked, _ in kept.values() for call in picked
        )
        if before:  # (the jobs still waiting, handed over as they were: not asked again)
            same = [jid for jid, entry in before.items() if kept.get(jid) is entry]
            assert len(same) > len(kept) // 2
        before = dict(kept)
        snap = _next(snap, alone.plan, ended=25)


def test_the_prefilter_calls_are_not_taken_back_over_a_pass_run_here_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass on the thread between the fork and the child's result (the server's
    ``auto``) changed what is kept here: the child's changes, made from what the fork
    found, are not taken in over it."""
    snap = build_workload(3_000, 300, seed=1).snapshot()
    other = build_workload(3_000, 300, seed=2).snapshot()
    forked = ForkedScheduler(build_scheduler())
    receive = ForkedScheduler._receive

    def pass_here_first(self: ForkedScheduler, child: Any) -> Any:
        if not child.jobs:  # (the pass's result, not a forecast slice)
            self.scheduler.run_pass(other)
        return receive(self, child)

    monkeypatch.setattr(ForkedScheduler, "_receive", pass_here_first)
    there = forked.run_pass(snap)
    forked.close()
    witness, child = build_scheduler(), build_scheduler()
    witness.run_pass(other)
    child.run_pass(snap)
    assert there.process is not None
    assert _kept(forked.scheduler) == _kept(witness) != _kept(child)


def test_prefilter_calls_are_taken_back_only_for_the_pass_s_own_jobs() -> None:
    """Changes adopted with pending jobs other than the pass's (a job not at the place
    the child found it) leave that job out instead of keeping another's calls for it."""
    snap = build_workload(3_000, 300, seed=1).snapshot()
    child, parent = build_scheduler(), build_scheduler()
    mark = child.framework.own_mark()
    child.run_pass(snap)
    changes = child.framework.own_changes(mark, snap.pending)
    assert changes is not None and len(changes.changed) > 1_000
    parent.run_pass(snap)  # (the parent keeps the same jobs' calls already)
    seeded = len(parent.framework._own)
    epoch = parent.framework._own_epoch  # (as a child forked from it would send them)
    onto = dataclasses.replace(changes, base_epoch=epoch, epoch=epoch + 1)
    moved = (*snap.pending[1:], snap.pending[0])
    parent.framework.adopt_own(onto, moved)
    assert seeded > 1_000 and not parent.framework._own  # (each one place off: let go)
    parent.framework.adopt_own(onto, snap.pending)
    assert not parent.framework._own  # (taken in once: its mark is past)
    fresh = build_scheduler()
    fresh.framework.adopt_own(changes, snap.pending)
    assert _kept(fresh) == _kept(child)
