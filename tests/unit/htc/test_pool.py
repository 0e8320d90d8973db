"""Worker-pool planning over time (virtual clock): workers move between sessions."""

from __future__ import annotations

from hal.htc import protocol as p
from hal.htc.fairshare import ReleasePolicy
from hal.htc.pool import plan_pool, worker_launch
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


def test_leased_out_workers_are_replaced() -> None:
    policy = ReleasePolicy()
    a = session("a", 100, ready=1)
    a.options = a.options.model_copy(update={"worker_lease_seconds": 60, "max_workers": 1})
    plan = plan_pool([a], 4, policy, now=61.0)
    assert [w.job_id for w in plan.release] == [1]
    assert plan.launch == {"a": 1}


def test_the_worker_job_runs_the_worker_module_as_the_session_user() -> None:
    a = session("a", 0)
    launch = worker_launch(a, "10.0.0.1:7000")
    assert launch.user == "alice" and launch.session == "a"
    assert launch.script.endswith("-m hal.htc.worker --broker 10.0.0.1:7000 --session a\n")
    # the key in the environment, not on a command line every user of the node reads
    assert a.worker_key not in launch.script
    assert launch.environment["HAL_HTC_WORKER_KEY"] == a.worker_key
