"""Worker-pool planning over time (virtual clock): workers move between sessions."""

from __future__ import annotations

from hal.htc import protocol as p
from hal.htc.fairshare import ReleasePolicy
from hal.htc.pool import (
    DRAIN_MARGIN_S,
    RECYCLE_DEFER_S,
    plan_pool,
    worker_launch,
    worker_time_limit,
)
from hal.htc.rest import ServiceSpec, SessionOptions
from hal.htc.session import Session, Worker


def session(name: str, backlog: int, *, ready: int = 0, user: str = "alice") -> Session:
    s = Session(
        id=name,
        user=user,
        options=SessionOptions(service=ServiceSpec(target="m:f"), max_workers=8),
        created=0,
    )
    s.book.add([x for i in range(backlog) for x in (i, p.pack([]))])
    for j in range(ready):
        s.workers[j + 1] = Worker(job_id=j + 1, session=name, state="ready")
    return s


def test_a_new_session_gets_workers_moved_from_a_busy_one() -> None:
    """Session a holds the whole pool of 4; b arrives with work. b's jobs are launched at
    once; a gives up 2 workers only after the reclaim delay, least loaded first."""
    policy = ReleasePolicy(idle_s=10, reclaim_s=1)
    a = session("a", 1000, ready=4)
    b = session("b", 1000, user="bob")
    plan = plan_pool([a, b], 4, policy, now=0.0)
    assert plan.targets == {"a": 2, "b": 2}
    assert plan.launch == {"b": 2}
    assert plan.release == []  # not yet: demand flickers
    plan = plan_pool([a, b], 4, policy, now=1.5)
    assert len(plan.release) == 2 and all(w.session == "a" for w in plan.release)


def test_an_idle_session_keeps_warm_workers_for_a_while_then_lets_go() -> None:
    policy = ReleasePolicy(idle_s=10, reclaim_s=1)
    a = session("a", 0, ready=2)
    assert plan_pool([a], 4, policy, now=0.0).release == []
    assert plan_pool([a], 4, policy, now=5.0).release == []
    assert len(plan_pool([a], 4, policy, now=10.0).release) == 2


def leased(s: Session, **options: float) -> Session:
    s.options = s.options.model_copy(update={"worker_lease_seconds": 60, **options})
    return s


def test_a_leased_out_worker_is_replaced_once_its_job_has_ended() -> None:
    """The replacement was launched as the old worker began to drain, so a session held
    one worker job over ``max_workers`` until it ended (measured live: 4 jobs at once
    with ``max_workers=2``). Every job counts until the control plane reports its end."""
    policy = ReleasePolicy()
    a = leased(session("a", 100, ready=1), max_workers=1)
    plan = plan_pool([a], 4, policy, now=61.0)
    assert [w.job_id for w in plan.release] == [1] and plan.launch == {}
    for state in ("draining", "exiting"):
        a.workers[1].state = state
        assert plan_pool([a], 4, policy, now=62.0).launch == {}
    del a.workers[1]  # its end was reported
    assert plan_pool([a], 4, policy, now=63.0).launch == {"a": 1}


def test_workers_are_recycled_a_quarter_at_a_time_and_at_most_60_s_late() -> None:
    """All 8 workers, started together, were drained at once when their lease ended:
    the session served nothing while 8 replacements started. A quarter of them go at a
    time; none is kept more than ``RECYCLE_DEFER_S`` past its lease."""
    policy = ReleasePolicy()
    a = leased(session("a", 1000, ready=8))
    first = plan_pool([a], 8, policy, now=60.0).release
    assert [w.job_id for w in first] == [1, 2]
    for w in first:
        w.state = "draining"
    assert plan_pool([a], 8, policy, now=61.0).release == []  # 2 of 8 still ending
    late = plan_pool([a], 8, policy, now=60.0 + RECYCLE_DEFER_S).release
    assert [w.job_id for w in late] == [3, 4, 5, 6, 7, 8]


def test_a_worker_serves_ten_times_its_start_up_before_it_is_recycled() -> None:
    """A 1 s lease recycled each worker every second: the session spent its time starting
    workers (measured live: 28 worker jobs for 3,000 tasks of 10 ms on 2 workers). A
    worker that took 5 s to start serves 50 s first (at most its lease + 60 s)."""
    policy = ReleasePolicy()
    a = leased(session("a", 100, ready=1), worker_lease_seconds=1)
    a.workers[1].launched_at, a.workers[1].ready_at = -5.0, 0.0
    assert plan_pool([a], 4, policy, now=49.0).release == []
    assert [w.job_id for w in plan_pool([a], 4, policy, now=50.0).release] == [1]
    a.workers[1].launched_at = -100.0  # a start of 100 s (a long queue): 61 s at most
    assert [w.job_id for w in plan_pool([a], 4, policy, now=61.0).release] == [1]
    assert worker_time_limit(1) == 1 + RECYCLE_DEFER_S + DRAIN_MARGIN_S


def test_the_worker_job_runs_the_worker_module_as_the_session_user() -> None:
    a = session("a", 0)
    launch = worker_launch(a, "10.0.0.1:7000")
    assert launch.user == "alice" and launch.session == "a"
    assert launch.script.endswith("-m hal.htc.worker --broker 10.0.0.1:7000 --session a\n")
    # the key in the environment, not on a command line every user of the node reads
    assert a.worker_key not in launch.script
    assert launch.environment["HAL_HTC_WORKER_KEY"] == a.worker_key
