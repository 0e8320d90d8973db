"""hal.sim.traffic: services and clients over a trace, what the graph has seen, the
switches a client's traffic crosses and what they cost; and, replayed, the plugin keeping
clients' traffic under their service's leaf switch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hal.bench.harmonic import scheduler
from hal.core.job import JobSpec
from hal.core.node import Node
from hal.core.resources import ResourceVector
from hal.core.traffic import identity
from hal.sim.cluster import ClusterModel
from hal.sim.engine import Simulation
from hal.sim.swf import SwfRecord
from hal.sim.topology import with_topology
from hal.sim.traffic import (
    FIRST_ID,
    CommSpec,
    CommWorkload,
    Flow,
    TrafficModel,
    comm_workload,
    switches_between,
)
from hal.sim.workload import TraceJob
from hal.testing import make_job

PATHS = {
    "a": ("core", "s0", "l0"),
    "b": ("core", "s0", "l0"),
    "c": ("core", "s0", "l1"),
    "d": ("core", "s1", "l2"),
    "e": ("x", "s9", "l9"),  # under another top switch: only the core joins them
}
NODES = [Node(name, ResourceVector(4), topology=path) for name, path in PATHS.items()]
SVC, CLIENT = "u1/svc", "u1/app0"
# (the record's fields are not read here)
REC = SwfRecord(
    -1, -1.0, -1.0, -1.0, -1, -1.0, -1.0, -1, -1.0, -1.0, 1, 1, -1, -1, -1, -1, -1, -1.0
)


def test_switches_on_the_path_between_two_nodes() -> None:
    assert [switches_between(PATHS, "a", n) for n in PATHS] == [0, 1, 3, 5, 7]


def _trace(count: int, gap: float) -> tuple[TraceJob, ...]:
    return tuple(TraceJob(i, i * gap, 100.0, 4, 200.0, 1, REC) for i in range(1, count + 1))


def test_the_workload_covers_the_trace_and_is_seeded() -> None:
    trace = _trace(50, 3_600.0)  # submits from 1 h to 50 h
    spec = CommSpec(groups=3, restart_s=86_400.0, campaign_gap_s=3_600.0)
    comm = comm_workload(trace, seed=4, spec=spec)
    assert comm == comm_workload(trace, seed=4, spec=spec)
    assert [j.submit for j in comm.jobs] == sorted(j.submit for j in comm.jobs)
    assert {j.id for j in trace} <= {j.id for j in comm.jobs}
    assert all(job_id >= FIRST_ID for job_id in comm.labels)
    # instances at 1 h, 25 h and 49 h, each up 30 h
    assert len(comm.services) == 3 and set(comm.services.values()) == {3}
    assert comm.flows and all(f.service in comm.services for f in comm.flows.values())
    labels = {comm.labels[j] for j in comm.flows}
    assert any(label.startswith("harmonic=app") for label in labels)
    assert any(label.startswith("harmonic=run") for label in labels)


def _model(mode: str) -> TrafficModel:
    jobs = (
        TraceJob(FIRST_ID, 0.0, 1_000.0, 1, 3_000.0, 1, REC),
        TraceJob(FIRST_ID + 1, 0.0, 500.0, 1, 2_000.0, 1, REC),
    )
    comm = CommWorkload(
        jobs,
        labels={FIRST_ID: "harmonic=svc", FIRST_ID + 1: "harmonic=app0"},
        flows={FIRST_ID + 1: Flow(SVC, 2e6, 0.5)},
        services={SVC: 1},
        expected={(CLIENT, SVC): 6e6},
    )
    return TrafficModel(comm, NODES, mode, per_switch=0.1, seen_after_s=30.0, half_life_s=100.0)


def _job(job_id: int, label: str) -> JobSpec:
    return JobSpec(user="u1", script="", comment=label)


def _start(model: TrafficModel, job_id: int, node: str, now: float) -> float:
    spec = _job(job_id, model.comment(job_id))
    return model.started(make_job(job_id).build().evolve(spec=spec), (node,), now)


def test_the_learned_graph_knows_a_pair_once_a_client_was_seen_beside_its_service() -> None:
    model = _model("learned")
    view = model.view(0.0)
    assert view is not None and not view.between
    _start(model, FIRST_ID, "a", 0.0)
    _start(model, FIRST_ID + 1, "c", 10.0)
    assert not model.view(20.0).between  # type: ignore[union-attr]  # (not yet reported)
    seen = model.view(40.0)
    assert seen is not None and seen.peers(CLIENT) == {SVC: 2e6}
    assert seen.identities == {FIRST_ID: SVC, FIRST_ID + 1: CLIENT}
    model.ended(FIRST_ID + 1)
    later = model.view(140.0)  # one half-life after it was last seen
    assert later is not None and later.peers(SVC) == {CLIENT: pytest.approx(1e6)}


def test_the_oracle_knows_every_pair_from_the_start_and_off_knows_none() -> None:
    oracle = _model("oracle").view(0.0)
    assert oracle is not None and oracle.peers(SVC) == {CLIENT: 6e6}
    assert _model("off").view(0.0) is None
    with pytest.raises(ValueError, match="mode must be one of off, learned, oracle"):
        _model("psychic")


@pytest.mark.parametrize(
    ("node", "switches", "cross"),
    [("a", 0, False), ("b", 1, False), ("c", 3, True), ("e", 7, True)],
)
def test_a_client_runs_longer_per_switch_and_its_bytes_count_beyond_its_leaf(
    node: str, switches: int, cross: bool
) -> None:
    model = _model("off")
    _start(model, FIRST_ID, "a", 0.0)
    slowed = _start(model, FIRST_ID + 1, node, 0.0)
    assert model.switches[FIRST_ID + 1] == switches
    assert slowed == pytest.approx(500.0 * 0.5 * 0.1 * switches)
    assert model.bytes_total == 2e6 * 500.0
    assert model.cross_switch_bytes == (2e6 * 500.0 if cross else 0.0)


def test_a_client_without_its_service_up_goes_through_the_core() -> None:
    model = _model("off")
    _start(model, FIRST_ID + 1, "a", 0.0)
    assert model.switches[FIRST_ID + 1] == 7


def test_replayed_the_graph_keeps_clients_under_their_service_s_leaf() -> None:
    """A 64-node cluster of 4-CPU nodes on leaves of 8 under 2 levels, a background of
    one-node jobs, two services and their clients: with the graph the simulator has
    seen, fewer client bytes cross a leaf switch than without, and no more than 0.2 of
    them beyond what the oracle's placement leaves."""
    background = tuple(
        TraceJob(i, i * 40.0, 1_800.0, 1 + i % 4, 3_600.0, 1, REC) for i in range(1, 150)
    )
    spec = CommSpec(groups=2, restart_s=4 * 3600.0, campaign_gap_s=1_200.0, client_run_s=900.0)
    comm = comm_workload(background, seed=3, spec=spec)
    crossed = {}
    for mode in ("off", "learned", "oracle"):
        base = ClusterModel(nodes=64, cores_per_node=4)
        cluster, recorder = with_topology(base, scheduler(), "leaf=8,levels=2")
        model = TrafficModel(comm, cluster.build_nodes(), mode)
        run = Simulation(comm.jobs, cluster, recorder, traffic=model).run()
        assert all(o.start == o.start for o in run.outcomes)  # every job ran (not NaN)
        crossed[mode] = model.cross_switch_bytes / model.bytes_total
    assert crossed["learned"] < crossed["off"]
    assert crossed["learned"] - crossed["oracle"] < 0.2 * (crossed["off"] - crossed["oracle"])


def test_identity_of_a_labelled_job_is_its_user_and_label() -> None:
    model = _model("off")
    assert model.comment(FIRST_ID + 1) == "harmonic=app0"
    assert identity("u1", "sbatch", model.comment(FIRST_ID + 1)) == CLIENT
    assert replace(NODES[0]).topology == PATHS["a"]
