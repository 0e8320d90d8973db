"""The autoscaler's decisions (hal.cloud.autoscaler): which nodes a pass creates for
the waiting jobs, and which idle nodes it removes."""

from __future__ import annotations

from hal.cloud.autoscaler import Waiting, idle_to_remove, plan_scale_up
from hal.core.node import Partition
from hal.core.node_groups import NodeGroup
from hal.core.resources import GiB, ResourceVector
from hal.testing.builders import JobBuilder, make_job

EVERY = (Partition(name="batch"),)


def group(
    name: str, count: int, cpus: int, price: float, *, gpus: int = 0, **kw: object
) -> NodeGroup:
    return NodeGroup(
        name=name,
        provider="local",
        nodes=tuple(f"{name}{i}" for i in range(1, count + 1)),
        resources=ResourceVector(cpus, 16 * GiB, gpus),
        price_per_hour=price,
        **kw,  # type: ignore[arg-type]
    )


def waiting(*builders: JobBuilder, partitions: tuple[Partition, ...] = EVERY) -> list[Waiting]:
    jobs = [b.build() for b in builders]
    return [Waiting(j.id, j.spec, partitions) for j in jobs]


def plan(jobs: list[Waiting], groups: list[NodeGroup], existing=(), booting=None, room=None):  # type: ignore[no-untyped-def]
    """``booting``: node → group of booting nodes (all their size free); ``room``:
    node → (group, room left) of joined ones."""
    by_name = {g.name: g for g in groups}
    spare = {n: (g, by_name[g].resources) for n, g in (booting or {}).items()}
    return {
        up.group: (up.names, up.jobs)
        for up in plan_scale_up(jobs, groups, existing, {**spare, **(room or {})})
    }


def test_the_cheapest_group_that_holds_the_job_is_opened() -> None:
    small, big = group("small", 4, 4, 0.2), group("big", 4, 32, 1.5)
    got = plan(waiting(make_job(1).cpus(2), make_job(2).cpus(16)), [big, small])
    assert got == {"big": (("big1",), (2,)), "small": (("small1",), (1,))}


def test_equal_prices_take_the_smaller_machine_then_config_order() -> None:
    a, b = group("a", 2, 16, 0.0), group("b", 2, 8, 0.0)
    assert plan(waiting(make_job(1).cpus(2)), [a, b]) == {"b": (("b1",), (1,))}
    c = group("c", 2, 8, 0.0)
    assert plan(waiting(make_job(1).cpus(2)), [c, b]) == {"c": (("c1",), (1,))}


def test_jobs_share_a_new_node_while_it_has_room() -> None:
    jobs = waiting(make_job(1).cpus(3), make_job(2).cpus(1), make_job(3).cpus(1))
    got = plan(jobs, [group("g", 4, 4, 1.0)])
    assert got == {"g": (("g1", "g2"), (1, 2, 3))}


def test_booting_nodes_are_filled_before_new_ones() -> None:
    got = plan(waiting(make_job(1).cpus(4)), [group("g", 4, 4, 1.0)], booting={"g1": "g"})
    assert got == {}
    got = plan(
        waiting(make_job(1).cpus(4), make_job(2).cpus(4)),
        [group("g", 4, 4, 1.0)],
        booting={"g1": "g"},
    )
    assert got == {"g": (("g2",), (2,))}


def test_joined_nodes_with_room_take_jobs_before_new_nodes() -> None:
    """A -N 2 job whose first node joined while its second boots gets no third."""
    g = group("g", 4, 4, 1.0)
    job = waiting(make_job(1).cpus(4).nodes(2))
    joined = {"g1": ("g", ResourceVector(4, 16 * GiB))}
    assert plan(job, [g], existing={"g1"}, booting={"g2": "g"}, room=joined) == {}
    full = {"g1": ("g", ResourceVector(0, 0))}  # the scheduler filled it
    got = plan(job, [g], existing={"g1"}, booting={"g2": "g"}, room=full)
    assert got == {"g": (("g3",), (1,))}


def test_existing_names_are_not_created_again_and_a_full_group_opens_nothing() -> None:
    g = group("g", 2, 4, 1.0)
    got = plan(waiting(make_job(1).cpus(4), make_job(2).cpus(4)), [g], existing={"g1"})
    assert got == {"g": (("g2",), (1,))}  # job 2 waits: the group has no name left


def test_a_multi_node_job_gets_all_its_nodes_or_none() -> None:
    g = group("g", 3, 4, 1.0)
    assert plan(waiting(make_job(1).cpus(4).nodes(2)), [g]) == {"g": (("g1", "g2"), (1,))}
    assert plan(waiting(make_job(1).cpus(4).nodes(4)), [g]) == {}


def test_what_a_group_cannot_hold_is_not_demand() -> None:
    g = group("g", 4, 8, 1.0, features=("cloud",))
    jobs = waiting(
        make_job(1).cpus(16),  # too big
        make_job(2).constraint("ib"),  # a feature it lacks
        make_job(3).gpus(1),  # no GPUs
        make_job(4).nodelist("n1"),  # named nodes
        make_job(5).mem_gib(32),
    )
    assert plan(jobs, [g]) == {}
    assert plan(waiting(make_job(6).constraint("cloud")), [g]) == {"g": (("g1",), (6,))}


def test_gpu_type_and_whole_node_memory() -> None:
    gpu = group("gpu", 2, 8, 3.0, gpus=4, gpu_model="NVIDIA A100-SXM4-80GB")
    assert plan(waiting(make_job(1).gpus(2, "h100")), [gpu]) == {}
    assert plan(waiting(make_job(2).gpus(2, "a100")), [gpu]) == {"gpu": (("gpu1",), (2,))}
    # --mem=0 takes the node's memory: the next job does not fit beside it
    cpu = group("cpu", 2, 8, 1.0)
    got = plan(
        waiting(make_job(3).cpus(1).whole_node_memory(), make_job(4).cpus(1).mem_gib(1)), [cpu]
    )
    assert got == {"cpu": (("cpu1", "cpu2"), (3, 4))}


def test_an_exclusive_job_takes_a_node_of_its_own() -> None:
    g = group("g", 4, 8, 1.0)
    got = plan(
        waiting(make_job(1).cpus(1), make_job(2).cpus(1).exclusive(), make_job(3).cpus(1)), [g]
    )
    assert got == {"g": (("g1", "g2"), (1, 2, 3))}
    # job 3 shares g1 with job 1, not g2 with the exclusive job 2


def test_partitions_and_exclude_limit_the_names() -> None:
    g = group("g", 3, 4, 1.0)
    only_g3 = (Partition(name="p", nodes=("g3", "n1")),)
    assert plan(waiting(make_job(1), partitions=only_g3), [g]) == {"g": (("g3",), (1,))}
    assert plan(waiting(make_job(2).exclude("g1")), [g]) == {"g": (("g2",), (2,))}
    assert plan(waiting(make_job(3), partitions=(Partition(name="p", nodes=("n1",)),)), [g]) == {}


def test_idle_nodes_past_their_groups_limit_go_longest_idle_first() -> None:
    g = group("g", 3, 4, 1.0, idle_seconds=60.0)
    keep = group("k", 1, 4, 1.0, idle_seconds=0.0)  # 0: never removed
    idle = {"g1": 100.0, "g2": 10.0, "g3": 150.0, "k1": 0.0}
    assert idle_to_remove(idle, [g, keep], now=165.0) == ["g2", "g1"]


def test_a_multi_node_job_mixes_groups_cheapest_first() -> None:
    cheap, dear = group("cheap", 2, 4, 0.5), group("dear", 4, 4, 2.0)
    got = plan(waiting(make_job(1).cpus(4).nodes(3)), [dear, cheap])
    assert got == {"cheap": (("cheap1", "cheap2"), (1,)), "dear": (("dear1",), (1,))}


def test_nodes_outside_the_groups_make_up_part_of_the_count() -> None:
    """-N 5 on node1 (room for it now) and burst[1-4]: four nodes are made, not none."""
    g = group("burst", 4, 4, 1.0)
    job = make_job(1).cpus(4).nodes(5).build()
    (up,) = plan_scale_up([Waiting(1, job.spec, EVERY, others=1)], [g], (), {})
    assert up.names == ("burst1", "burst2", "burst3", "burst4")
    # it waits for the nodes that exist when they are enough
    assert plan_scale_up([Waiting(1, job.spec, EVERY, others=5)], [g], (), {}) == []


def test_each_new_node_knows_the_jobs_it_is_made_for() -> None:
    """(``hal explain`` names the nodes made for a job, not every node of the pass.)"""
    jobs = waiting(make_job(1).cpus(3), make_job(2).cpus(1), make_job(3).cpus(1))
    (up,) = plan_scale_up(jobs, [group("g", 4, 4, 1.0)], (), {})
    assert up.per_node == {"g1": (1, 2), "g2": (3,)}


def test_the_burst_decisions_costs_rank_the_groups_and_bar_the_others() -> None:
    """A job with costs (``hal.cloud.burst``) opens new nodes in its cheapest costed
    group, never in a group it has no cost for, yet still takes a booting node there."""
    cheap, dear = group("cheap", 4, 4, 0.1), group("dear", 4, 4, 0.9)
    job = make_job(1).cpus(2).build()
    # the dearer an hour is the cheaper to finish (the cheap one is spot and risky, say)
    ranked = [Waiting(job.id, job.spec, EVERY, costs={"cheap": 5.0, "dear": 2.0})]
    assert plan(ranked, [cheap, dear]) == {"dear": (("dear1",), (1,))}
    only = [Waiting(job.id, job.spec, EVERY, costs={"cheap": 5.0})]
    assert plan(only, [cheap, dear]) == {"cheap": (("cheap1",), (1,))}
    # no group costed (none boots in time): no new node, but a booting one is taken
    none = [Waiting(job.id, job.spec, EVERY, costs={})]
    assert plan(none, [cheap, dear]) == {}
    assert plan(none + waiting(make_job(2).cpus(1)), [cheap], booting={"cheap1": "cheap"}) == {}
