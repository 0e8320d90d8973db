"""The feedback loop on a real control plane (SQLite store, the cluster's change
handle; jobs put in as running, their feedback stored as reports are): a job whose
feedback fell beside a clashing neighbour has the lower-priority one moved (requeued
after its grace, with a preferred ``--apart`` rule), once per interval, and a steady job
or a harmless neighbour moves nothing; a malleable
job is resized within its QoS's node limit; each action is an event with its reason and
counted on /metrics."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import httpx

from hal.api.server import HalServer
from hal.config.harmonic import HarmonicConfig
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.dissonance import DissonanceView
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job
from hal.core.job_rules import JobRule
from hal.core.malleable import ACTION, NODES, MalleableRange
from hal.core.preemption import GRACE_END
from hal.core.priority import Qos, TresLimits
from hal.core.profiles import CPU, MEMORY, PROFILE_CLASS
from hal.core.states import JobState, PendingReason
from hal.server.malleable import FeedbackLoop
from hal.state import preempt
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import store

START = 1_000_000.0
CLASH = DissonanceView(slowdown={MEMORY: {CPU: 1.6}}, job_class={})


def _server(tmp_path: Path, clock: VirtualClock, config: HalConfig) -> HalServer:
    server = HalServer(config, f"sqlite:///{tmp_path / 'hal.db'}", clock, data_dir=tmp_path / "d")
    asyncio.run(server.cluster.load())
    for name in ("n1", "n2", "n3", "n4"):
        server.cluster.nodes[name] = make_node(name).cpus(4).build()
    return server


def _reports(server: HalServer, job_id: int, values: list[float], at: float) -> None:
    series = FeedbackSeries.first(job_id, "rate", at, values[0])
    for k, v in enumerate(values[1:], start=1):
        series = series.add_point(at + 10 * k, v)
    cluster = server.cluster
    asyncio.run(cluster.db(cluster.store.keep_job_feedback, [series]))


def _running(job_id: int, *nodes: str, cls: str, priority: int, cpus: int = 2) -> Job:
    job = (
        make_job(job_id)
        .user("ann")
        .cpus(cpus)
        .priority(priority)
        .extra(PROFILE_CLASS, cls)
        .running_on(*nodes, start=START)
        .build()
    )
    return job.evolve(launched=True, spec=job.spec.with_changes(feedback_goals=(("rate", "max"),)))


def _events(server: HalServer, kind: str) -> list[dict[str, object]]:
    rows = server.cluster.store.events_after(0, 1000)
    return [dict(r.data) | {"job_id": r.job_id} for r in rows if r.kind == kind]


def test_a_fallen_job_beside_a_clashing_neighbour_has_the_lower_priority_one_moved(
    tmp_path: Path,
) -> None:
    clock = VirtualClock(START + 100)
    server = _server(tmp_path, clock, HalConfig(cluster_name="t"))
    victim = _running(1, "n1", cls=MEMORY, priority=900)
    noisy = _running(2, "n1", cls=CPU, priority=100)
    calm = _running(3, "n2", cls=MEMORY, priority=900)  # steady beside a clashing job
    neighbour = _running(4, "n2", cls=CPU, priority=100)
    store(server.cluster, victim, noisy, calm, neighbour)
    _reports(server, 1, [100, 100, 100, 60, 55, 58], START)
    _reports(server, 3, [100, 100, 100, 100, 100, 100], START)
    loop = FeedbackLoop(server.cluster, server.feedback, lambda: CLASH)

    asyncio.run(loop.tick())
    moved = server.cluster.jobs[2]
    assert loop.moved == 1
    assert moved.extra[preempt.REQUEUE] == "1" and GRACE_END in moved.extra
    assert JobRule(job_id=1, required=False) in moved.spec.apart
    assert "fell and stayed down" in moved.extra[ACTION]
    assert preempt.REQUEUE not in server.cluster.jobs[1].extra  # the victim stays
    assert preempt.REQUEUE not in server.cluster.jobs[4].extra  # its neighbour's is steady
    (event,) = _events(server, "job.moved")
    assert event["job_id"] == 2 and event["away_from"] == 1
    assert "×1.60" in str(event["reason"])

    # the next tick moves nothing more: the pair was acted on within the interval
    asyncio.run(loop.tick())
    assert loop.moved == 1 and len(_events(server, "job.moved")) == 1


def test_a_harmless_neighbour_moves_nothing(tmp_path: Path) -> None:
    clock = VirtualClock(START + 100)
    server = _server(tmp_path, clock, HalConfig(cluster_name="t"))
    store(
        server.cluster,
        _running(1, "n1", cls=MEMORY, priority=900),
        _running(2, "n1", cls=CPU, priority=100),
    )
    _reports(server, 1, [100, 100, 100, 60, 55, 58], START)
    harmless = DissonanceView(slowdown={MEMORY: {CPU: 1.05}})
    asyncio.run(FeedbackLoop(server.cluster, server.feedback, lambda: harmless).tick())
    assert _events(server, "job.moved") == []


def test_a_malleable_job_grows_into_free_nodes_up_to_its_qos_limit(tmp_path: Path) -> None:
    clock = VirtualClock(START + 3600)
    small = Qos("small", max_tres_per_job=TresLimits(nodes=2))
    config = HalConfig(
        cluster_name="t",
        harmonic=HarmonicConfig(resize_interval_s=60.0),
        priority=dataclasses.replace(HalConfig().priority, qos=(small,)),
    )
    server = _server(tmp_path, clock, config)
    job = _running(1, "n1", cls=CPU, priority=500, cpus=4)
    spec = job.spec.with_changes(
        malleable=MalleableRange(NODES, 1, 4), nodes_max=4, qos="small", ntasks_per_node=4
    )
    store(server.cluster, job.evolve(spec=spec))
    _reports(server, 1, [100, 101, 99], START)
    loop = FeedbackLoop(server.cluster, server.feedback, None)
    asyncio.run(loop.tick())
    resized = server.cluster.jobs[1]
    assert loop.resized == 1
    assert (resized.spec.nodes_min, resized.spec.nodes_max) == (1, 2)  # QoS: 2 nodes at most
    assert resized.extra[preempt.REQUEUE] == "1"
    (event,) = _events(server, "job.resized")
    assert (event["from"], event["to"], event["unit"]) == (1, 2, "nodes")


def test_a_running_malleable_job_shrinks_to_let_a_waiting_one_in(tmp_path: Path) -> None:
    """Four nodes, all held by a job that scales poorly (its reports at 2 and 4 nodes
    say so); a malleable job waits for room: the running one comes down to make it
    some, and the reason says so."""
    clock = VirtualClock(START + 3600)
    server = _server(tmp_path, clock, HalConfig(cluster_name="t"))
    wide = _running(1, "n1", "n2", "n3", "n4", cls=CPU, priority=500, cpus=4)
    wide = wide.evolve(
        spec=wide.spec.with_changes(
            malleable=MalleableRange(NODES, 1, 4),
            nodes_min=1,
            nodes_max=4,
            ntasks_per_node=4,
            cpus_per_task=1,
        ),
        extra={**wide.extra, "malleable_runs": f"{START - 7200!r}:2"},
    )
    waiting = make_job(2).user("bob").priority(400).build()
    waiting = waiting.evolve(
        reason=PendingReason.RESOURCES,
        spec=waiting.spec.with_changes(
            malleable=MalleableRange(NODES, 1, 4), nodes_max=4, ntasks_per_node=4
        ),
    )
    store(server.cluster, wide, waiting)
    series = FeedbackSeries.first(1, "rate", START - 7000, 100.0)
    series = series.add_point(START - 6900, 100.0)
    for k in range(3):  # 4 nodes: barely faster than 2
        series = series.add_point(START + 10 * k, 115.0)
    asyncio.run(server.cluster.db(server.cluster.store.keep_job_feedback, [series]))
    asyncio.run(FeedbackLoop(server.cluster, server.feedback, None).tick())
    (event,) = _events(server, "job.resized")
    assert event["job_id"] == 1 and event["from"] == 4 and int(str(event["to"])) < 4
    assert str(event["reason"]).startswith("its CPUs gain more elsewhere")
    assert server.cluster.jobs[2].state is JobState.PENDING  # the scheduler starts it


def _metrics(server: HalServer) -> str:
    """``GET /metrics`` of the server's app, as Prometheus scrapes it."""

    async def scrape() -> str:
        transport = httpx.ASGITransport(app=server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hal") as http:
            r = await http.get("/metrics")
            assert r.status_code == 200, r.text
            return r.text

    return asyncio.run(scrape())


def test_each_move_and_resize_is_counted_on_metrics(tmp_path: Path) -> None:
    """An operator graphs how often the loop acts: the server's own loop (wired to its
    metrics) moves one job and grows another, and /metrics counts each by partition and
    by reason or direction."""
    clock = VirtualClock(START + 3600)
    config = HalConfig(cluster_name="t", harmonic=HarmonicConfig(resize_interval_s=60.0))
    server = _server(tmp_path, clock, config)
    grower = _running(5, "n3", cls=CPU, priority=500, cpus=4)
    grower = grower.evolve(
        spec=grower.spec.with_changes(
            malleable=MalleableRange(NODES, 1, 2), nodes_max=2, ntasks_per_node=4
        )
    )
    store(
        server.cluster,
        _running(1, "n1", cls=MEMORY, priority=900),
        _running(2, "n1", cls=CPU, priority=100),
        grower,
    )
    _reports(server, 1, [100, 100, 100, 60, 55, 58], START)
    _reports(server, 5, [100, 101, 99], START)
    before = _metrics(server)
    assert "hal_jobs_moved_total{" not in before and "hal_jobs_resized_total{" not in before
    loop = server.feedback_loop
    loop.dissonance = lambda: CLASH
    asyncio.run(loop.tick())
    assert (loop.moved, loop.resized) == (1, 1)
    part = server.cluster.jobs[2].partition
    after = _metrics(server)
    assert f'hal_jobs_moved_total{{partition="{part}",reason="dissonance"}} 1.0' in after
    assert f'hal_jobs_resized_total{{direction="grow",partition="{part}"}} 1.0' in after
