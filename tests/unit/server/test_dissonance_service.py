"""The server's interference model: job ends (their run time against the predictor's
solo estimate, and what shared their node) teach the matrix, ``GET
/v1/harmonic/dissonance`` and ``hal harmonic dissonance`` show it with the observations,
``/v1/harmonic/eval`` checks it, and it is kept over a restart."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hal.api.server import HalServer
from hal.cli.harmonic import draw_dissonance, draw_eval
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job
from hal.core.profiles import LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.states import JobState
from hal.server.dissonance import feedback_outcome
from hal.server.users import ensure_user
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import commit, store
from hal.wire.harmonic import Dissonance, DissonanceEval

START = 1_000_000.0
SOLO_S = 1000.0


def _server(tmp_path: Path, clock: VirtualClock) -> HalServer:
    server = HalServer(
        HalConfig(cluster_name="t"),
        f"sqlite:///{tmp_path / 'hal.db'}",
        clock,
        data_dir=tmp_path / "data",
    )
    asyncio.run(server.cluster.load())
    for name in ("n1", "n2"):
        server.cluster.nodes[name] = make_node(name).cpus(8).build()
    asyncio.run(server.dissonance.start())
    return server


def _job(job_id: int, node: str, cls: str, at: float) -> Job:
    built = make_job(job_id).user("ann").name(f"sim{job_id % 3}").cpus(4).extra(PROFILE_CLASS, cls)
    return built.running_on(node, start=at).build()


def _round(server: HalServer, first_id: int, clock: VirtualClock) -> None:
    """Two memory-bound jobs share n1 (half of it each) and take 1.4x their solo
    estimate; a third runs alone on n2 in its solo time."""
    at = clock.now()
    a, b, c = (_job(first_id + k, n, "memory", at) for k, n in enumerate(("n1", "n1", "n2")))
    cluster = server.cluster
    store(cluster, a, b, c)
    asyncio.run(commit(cluster, [a, b, c]))  # the listener hears them start
    for job, took in ((c, SOLO_S), (a, 1.4 * SOLO_S), (b, 1.4 * SOLO_S)):
        clock.set(at + took)
        ended = job.evolve(state=JobState.COMPLETED, end_time=at + took)
        asyncio.run(commit(cluster, [ended]))
        # what the prediction service reports from its thread once it has observed it
        server.dissonance.run_finished(ended, SOLO_S, 3, took)
    clock.set(at + 2 * SOLO_S)


def test_job_ends_teach_the_matrix_and_the_route_and_cli_show_it(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    server = _server(tmp_path, clock)
    before = server.dissonance.model.slowdown("memory", "memory")
    for r in range(20):
        _round(server, 100 + 10 * r, clock)
    token = ensure_user(server.store, "admin", admin=True, now=START)
    client = TestClient(server.app)
    auth = {"Authorization": f"Bearer {token}"}
    r = client.get("/v1/harmonic/dissonance", headers=auth)
    assert r.status_code == 200, r.text
    model = Dissonance.model_validate(r.json())
    assert model.outcomes_learnt == 60
    cells = {(c.victim, c.aggressor): c for c in model.cells}
    learnt = cells["memory", "memory"]
    # 1.4x at half the node: toward 1.4 ** 2 = 1.96 for a full one, from the prior's
    # 1.05 (which still weighs as one fully exposed observation)
    assert before < 1.06 < 1.6 < learnt.slowdown < 1.96
    assert learnt.observations == 40  # the shared runs; the solo ones exposed to nothing
    assert cells["cpu", "memory"].observations == 0
    assert cells["cpu", "memory"].slowdown == model.prior
    table = draw_dissonance(model)
    assert f"{learnt.slowdown:.2f} (40)" in table.splitlines()[2 + 1]  # the memory row

    r = client.get("/v1/harmonic/eval", headers=auth)
    checked = DissonanceEval.model_validate(r.json())
    assert checked.all.outcomes == 60 and checked.shared.outcomes == 40
    assert checked.shared.mae is not None and checked.shared.baseline_mae is not None
    assert checked.shared.mae < checked.shared.baseline_mae
    assert "shared a node" in draw_eval(checked)

    # the scheduler's view: the matrix and the workloads' classes
    server.dissonance._set_view()  # (what the next tick does)
    view = server.dissonance.view()
    assert view.of("memory", "memory") == learnt.slowdown
    assert view.identity_class["ann/sim0"] == "memory"

    # kept over a restart
    asyncio.run(server.dissonance.stop())
    again = _server(tmp_path, VirtualClock(clock.now()))
    assert again.dissonance.model.matrix() == server.dissonance.model.matrix()
    assert again.dissonance.evaluation()["all"]["outcomes"] == 60


def test_the_estimate_may_come_before_the_end_and_failed_runs_teach_nothing(
    tmp_path: Path,
) -> None:
    clock = VirtualClock(START)
    server = _server(tmp_path, clock)
    service = server.dissonance
    a, b = _job(1, "n1", "io", START), _job(2, "n1", "cpu", START)
    store(server.cluster, a, b)
    asyncio.run(commit(server.cluster, [a, b]))
    clock.set(START + 2000)
    ended = a.evolve(state=JobState.COMPLETED, end_time=START + 2000)
    service.run_finished(ended, SOLO_S, 2, 2000)  # the predictor's thread was first
    asyncio.run(commit(server.cluster, [ended]))
    assert service.learnt == 1
    assert service.model.observations()["io"]["cpu"] == 1
    failed = b.evolve(state=JobState.FAILED, end_time=START + 2000)
    asyncio.run(commit(server.cluster, [failed]))
    service.run_finished(failed, SOLO_S, 2, 2000)
    no_model = _job(3, "n2", "cpu", START + 2000)
    store(server.cluster, no_model)
    asyncio.run(commit(server.cluster, [no_model]))
    clock.set(START + 3000)
    done = no_model.evolve(state=JobState.COMPLETED, end_time=START + 3000)
    asyncio.run(commit(server.cluster, [done]))
    service.run_finished(done, 3600, 0, 1000)  # version 0: a time limit, not a pace
    assert service.learnt == 1


def test_latency_sensitive_running_jobs_are_protected_in_the_view(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    server = _server(tmp_path, clock)
    job = make_job(7).user("ann").cpus(2).extra(PROFILE_CLASS, "light")
    marked = job.extra(LATENCY_SENSITIVE, "1").running_on("n1", start=START).build()
    store(server.cluster, marked)
    asyncio.run(commit(server.cluster, [marked]))
    server.dissonance._set_view()
    view = server.dissonance.view()
    assert 7 in view.protected and view.job_class[7] == "light"


def test_a_feedback_drop_beside_a_neighbour_is_an_outcome_of_its_own(tmp_path: Path) -> None:
    """A job reports 100 samples/s alone, then 70 once a memory-bound job takes half its
    node: when it ends (cancelled, as services are) the drop is learnt, unbiased."""
    clock = VirtualClock(START)
    server = _server(tmp_path, clock)
    cluster, service = server.cluster, server.dissonance
    built = _job(1, "n1", "memory", START)
    app = dataclasses.replace(
        built, spec=built.spec.with_changes(feedback_goals=(("samples_per_s", "max"),))
    )
    store(cluster, app)
    asyncio.run(commit(cluster, [app]))
    clock.set(START + 100)
    hog = _job(2, "n1", "memory", START + 100)
    store(cluster, hog)
    asyncio.run(commit(cluster, [hog]))
    points: tuple[tuple[float, float], ...] = (
        (START + 10, 100.0), (START + 20, 100.0), (START + 30, 101.0),
        (START + 110, 70.0), (START + 120, 70.0), (START + 130, 71.0),
    )  # fmt: skip
    cluster.store.keep_job_feedback(
        [FeedbackSeries(1, "samples_per_s", 6, points[-1][0], points[-1][1], points)]
    )
    clock.set(START + 200)

    async def end() -> None:
        await commit(cluster, [app.evolve(state=JobState.CANCELLED, end_time=START + 200)])
        await service.settled()

    asyncio.run(end())
    assert service.from_feedback == 1 and service.learnt == 1
    assert service.model.observations()["memory"]["memory"] == 1
    (checked,) = service.checked
    assert checked.observed == pytest.approx(100.0 / 70.0, rel=0.01)
    assert checked.exposure == {"memory": 0.5}
    assert service.model.bias("memory") == pytest.approx(0.0, abs=1e-6)


def test_feedback_without_points_alone_teaches_nothing() -> None:
    timeline = [(0.0, {}), (100.0, {"io": 0.5})]
    beside = tuple((100.0 + t, 50.0) for t in range(10))
    only_shared = FeedbackSeries(1, "latency_ms", 10, 109.0, 50.0, beside)
    assert feedback_outcome("io", timeline, {"latency_ms": "min"}, [only_shared]) is None
    alone = ((1.0, 10.0), (2.0, 10.0), (3.0, 12.0))
    both = FeedbackSeries(1, "latency_ms", 13, 109.0, 50.0, alone + beside)
    found = feedback_outcome("io", timeline, {"latency_ms": "min"}, [both])
    assert found is not None and not found.biased
    assert found.slowdown == pytest.approx(5.0)  # latency 10 ms alone, 50 ms beside io
    assert feedback_outcome("io", timeline, {"other": "min"}, [both]) is None
