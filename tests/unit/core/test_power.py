"""Power saving's decisions (hal.core.power): a node's phase from its record, which idle
nodes are powered down, which sleeping nodes the waiting jobs wake, the rates, and the
sleeping capacity a burst decision reads."""

from __future__ import annotations

from hal.core.node import Node, Partition
from hal.core.power import (
    REASONS,
    Phase,
    Want,
    capacity,
    phase_of,
    plan_resume,
    power_counts,
    rate_left,
    to_suspend,
)
from hal.core.resources import GiB, ResourceVector
from hal.core.states import NodeState
from hal.testing.builders import JobBuilder, make_job

EVERY = (Partition(name="batch"),)
NO_LIMIT = 1 << 30


def node(name: str, cpus: int = 4, phase: Phase | None = None, **kw: object) -> Node:
    made = Node(name=name, resources=ResourceVector(cpus, 16 * GiB), **kw)  # type: ignore[arg-type]
    if phase is not None:
        made = made.evolve(state=NodeState.DRAIN, reason=REASONS[phase])
    return made


def wants(
    *builders: JobBuilder, awake: int = 0, parts: tuple[Partition, ...] = EVERY
) -> list[Want]:
    return [Want(j.id, j.spec, parts, awake) for j in (b.build() for b in builders)]


def asleep(*names: str, cpus: int = 4) -> list[Node]:
    return [node(n, cpus, Phase.POWERED_DOWN) for n in names]


def test_the_phase_is_the_servers_drain_reason_only() -> None:
    for phase, reason in REASONS.items():
        assert phase_of(node("n1").evolve(state=NodeState.DRAIN, reason=reason)) is phase
    # an operator's drain with another reason, and a DOWN node with a phase's reason,
    # are no phase: power saving leaves them alone
    assert phase_of(node("n1").evolve(state=NodeState.DRAIN, reason="disk errors")) is None
    down = node("n1").evolve(state=NodeState.DOWN, reason=REASONS[Phase.POWERED_DOWN])
    assert phase_of(down) is None
    assert phase_of(node("n1")) is None


def test_idle_nodes_are_powered_down_longest_idle_first_within_the_rate() -> None:
    idle = {"a": 100.0, "b": 50.0, "c": 180.0}
    assert to_suspend(idle, 60, now=200, allowed=NO_LIMIT) == ["b", "a"]  # c: 20 s idle
    assert to_suspend(idle, 60, now=200, allowed=1) == ["b"]
    assert to_suspend(idle, 60, now=200, allowed=0) == []
    assert to_suspend(idle, -1, now=10_000, allowed=NO_LIMIT) == []  # off


def test_a_rate_counts_the_last_minute_only() -> None:
    assert rate_left([100.0, 130.0, 159.0], 5, now=159.9) == 2
    assert rate_left([100.0, 130.0, 159.0], 5, now=160) == 3  # 100 is a minute old
    assert rate_left([1.0] * 10, 3, now=2) == 0
    assert rate_left([1.0] * 10, 0, now=2) >= 1 << 20  # 0: no limit


def test_a_waiting_job_wakes_the_first_sleeping_node_that_holds_it() -> None:
    nodes = [node("n1", 2, Phase.POWERED_DOWN), *asleep("n2", "n3")]
    got = plan_resume(wants(make_job(1).cpus(4)), nodes, [], NO_LIMIT)
    assert got == {"n2": (1,)}  # n1 is too small


def test_jobs_share_a_node_being_woken_while_it_has_room() -> None:
    got = plan_resume(
        wants(make_job(1).cpus(3), make_job(2).cpus(1), make_job(3).cpus(1)),
        asleep("n1", "n2", "n3"),
        [],
        NO_LIMIT,
    )
    assert got == {"n1": (1, 2), "n2": (3,)}


def test_a_node_already_waking_is_used_before_another_is_woken() -> None:
    waking = [node("n9", 4, Phase.POWERING_UP)]
    got = plan_resume(
        wants(make_job(1).cpus(4), make_job(2).cpus(4)), asleep("n1", "n2"), waking, NO_LIMIT
    )
    assert got == {"n1": (2,)}  # job 1 waits for n9


def test_a_job_with_room_on_awake_nodes_wakes_nothing() -> None:
    assert plan_resume(wants(make_job(1).cpus(1), awake=1), asleep("n1"), [], NO_LIMIT) == {}
    # a two-node job with one awake node wakes one more
    two = wants(make_job(2).nodes(2).cpus(1), awake=1)
    assert plan_resume(two, asleep("n1", "n2"), [], NO_LIMIT) == {"n1": (2,)}


def test_a_job_the_sleeping_nodes_cannot_complete_wakes_none() -> None:
    assert plan_resume(wants(make_job(1).nodes(3)), asleep("n1", "n2"), [], NO_LIMIT) == {}
    assert plan_resume(wants(make_job(2).constraint("gpu")), asleep("n1"), [], NO_LIMIT) == {}
    assert plan_resume(wants(make_job(3).cpus(1).exclude("n1")), asleep("n1"), [], NO_LIMIT) == {}
    other = (Partition(name="other", nodes=("m1",)),)
    assert plan_resume(wants(make_job(4), parts=other), asleep("n1"), [], NO_LIMIT) == {}


def test_a_job_naming_nodes_wakes_those_that_sleep() -> None:
    got = plan_resume(
        wants(make_job(1).nodelist("n2", "n3")), asleep("n1", "n2", "n3"), [], NO_LIMIT
    )
    assert got == {"n2": (1,), "n3": (1,)}


def test_the_resume_rate_bounds_the_nodes_woken_in_priority_order() -> None:
    jobs = wants(make_job(1).cpus(4), make_job(2).cpus(4), make_job(3).cpus(4))
    assert plan_resume(jobs, asleep("n1", "n2", "n3"), [], 2) == {"n1": (1,), "n2": (2,)}
    assert plan_resume(jobs, asleep("n1", "n2", "n3"), [], 0) == {}


def test_an_exclusive_job_takes_a_whole_node() -> None:
    got = plan_resume(
        wants(make_job(1).cpus(1).exclusive(), make_job(2).cpus(1)),
        asleep("n1", "n2"),
        [],
        NO_LIMIT,
    )
    assert got == {"n1": (1,), "n2": (2,)}


def test_capacity_lists_the_sleeping_nodes_with_their_wake_times() -> None:
    nodes = [
        node("up"),
        node("asleep", phase=Phase.POWERED_DOWN),
        node("waking", phase=Phase.POWERING_UP),
        node("going", phase=Phase.POWERING_DOWN),
        node("asked", phase=Phase.REQUESTED),  # runs jobs: no capacity to wake
    ]
    since = {"waking": 990.0, "going": 995.0}
    got = capacity(nodes, since, 1000.0, boot_s=40, suspend_timeout=30)
    assert [(a.node.name, a.phase, a.ready_at) for a in got] == [
        ("waking", Phase.POWERING_UP, 1030.0),  # 10 s into its 40
        ("asleep", Phase.POWERED_DOWN, 1040.0),
        ("going", Phase.POWERING_DOWN, 1065.0),  # down at 1025, then 40 s up
    ]
    late = capacity(nodes, {"waking": 900.0}, 1000.0, boot_s=40, suspend_timeout=30)
    assert late[0].node.name == "waking" and late[0].ready_at == 1000.0  # overdue: now


def test_power_counts_every_phase() -> None:
    nodes = [node("a"), *asleep("b", "c"), node("d", phase=Phase.POWERING_UP)]
    assert power_counts(nodes) == {
        Phase.REQUESTED: 0,
        Phase.POWERING_DOWN: 0,
        Phase.POWERED_DOWN: 2,
        Phase.POWERING_UP: 1,
    }
