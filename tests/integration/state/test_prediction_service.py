"""``PredictionService`` on a real ``Cluster`` (SQLite): which job changes it observes,
and that training never runs on the caller's (the event loop's) thread."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import LearnedPredictor, PinnedPredictor, SharedPredictor, UserPredictor
from hal.predict.features import NAMES
from hal.server.predictions import PredictionService, accuracy
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore


class SlowPredictor:
    """Records what it observes; each observe takes ``delay`` (a model being trained)."""

    name = "user"
    model_version = 1

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.seen: list[tuple[int, float, JobState]] = []
        self.observing = threading.Event()  # set while inside observe
        self.warmed_on = ""

    def predict(self, job: Job) -> float:
        return 100.0

    def warm_up(self) -> None:
        self.warmed_on = threading.current_thread().name

    def observe(self, job: Job, runtime_s: float) -> None:
        self.observing.set()
        time.sleep(self.delay)
        self.seen.append((job.id, runtime_s, job.state))
        self.observing.clear()


def job(job_id: int, state: JobState, start: float | None, end: float | None) -> Job:
    return Job(
        id=job_id,
        spec=JobSpec(user="alice", script=""),
        partition="debug",
        state=state,
        start_time=start,
        end_time=end,
        time_limit_s=3600,
    )


def run_service(tmp_path: Path, predictor: SlowPredictor, scenario) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        cluster = Cluster(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"), HalConfig(),
                          VirtualClock(1000.0))  # fmt: skip
        await cluster.load()
        service = PredictionService(cluster, SharedPredictor(predictor))
        await service.start()
        try:
            await scenario(service)
        finally:
            await service.stop()
            await cluster.close()

    asyncio.run(main())


async def settle(service: PredictionService, observed: int) -> None:
    for _ in range(200):
        if service.observed >= observed and not service.replaying:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"observed {service.observed}, wanted {observed}")


class NearPredictor(SlowPredictor):
    """Says its first model is near once it has seen ``near_after`` finished jobs."""

    def __init__(self, near_after: int) -> None:
        super().__init__()
        self.near_after = near_after

    def near_training(self) -> bool:
        return len(self.seen) >= self.near_after


def test_the_warm_up_waits_until_the_first_training_is_near(tmp_path: Path) -> None:
    """lightgbm's import (``warm_up``) is a second of CPU a fresh server need not pay:
    the service warms up, on its worker, once the predictor says its first model is
    near, before the next job is observed."""
    predictor = NearPredictor(near_after=2)

    async def scenario(service: PredictionService) -> None:
        listener = service._on_jobs
        listener([job(1, JobState.COMPLETED, 100.0, 110.0)])
        await settle(service, 1)
        assert predictor.warmed_on == ""  # one finished job: not near
        listener([job(2, JobState.COMPLETED, 100.0, 120.0)])
        await settle(service, 2)
        for _ in range(200):
            if predictor.warmed_on:
                break
            await asyncio.sleep(0.01)
        assert predictor.warmed_on == "hal-predict"

    run_service(tmp_path, predictor, scenario)


def test_each_run_that_ended_is_observed_once_with_its_final_state(tmp_path: Path) -> None:
    predictor = SlowPredictor()

    async def scenario(service: PredictionService) -> None:
        reported: list[tuple[str, float, float]] = []
        service.on_finished = lambda *args: reported.append(args)
        listener = service._on_jobs
        listener([job(1, JobState.RUNNING, 100.0, None)])
        listener([job(1, JobState.COMPLETING, 100.0, None)])
        listener([job(1, JobState.FAILED, 100.0, 160.0)])
        listener([job(1, JobState.FAILED, 100.0, 160.0)])  # e.g. `scontrol update` afterwards
        listener([job(2, JobState.CANCELLED, None, 50.0)])  # never ran
        listener([job(3, JobState.RUNNING, 200.0, None)])
        listener([job(3, JobState.PENDING, None, None)])  # node failed: requeued
        listener([job(3, JobState.RUNNING, 300.0, None)])
        listener([job(3, JobState.COMPLETED, 300.0, 310.0)])
        await settle(service, 2)
        # at start, on the worker thread (it does not say when its training is near)
        assert predictor.warmed_on == "hal-predict"
        assert predictor.seen == [(1, 60.0, JobState.FAILED), (3, 10.0, JobState.COMPLETED)]
        # both compared with the prediction they had when they started
        assert accuracy(tuple(service.recent)) == accuracy([(100.0, 60.0), (100.0, 10.0)])
        assert service.at_start == {}
        # and the same pairs go to the metrics, once each, with the predictor's name
        assert reported == [("user", 100.0, 60.0), ("user", 100.0, 10.0)]

    run_service(tmp_path, predictor, scenario)


def test_time_suspended_is_not_run_time_to_learn_or_score(tmp_path: Path) -> None:
    """A job that ran 800 s around a two-hour suspension ran 800 s: that is what the
    predictor learns, what its accuracy and hal_prediction_error_ratio compare the
    prediction with, and what the dashboard's scatter shows (not 8,000 s)."""
    from hal.state.suspension import suspension

    predictor = SlowPredictor()

    async def scenario(service: PredictionService) -> None:
        reported: list[tuple[str, float, float]] = []
        service.on_finished = lambda *args: reported.append(args)
        running = job(1, JobState.RUNNING, 1000.0, None)
        service._on_jobs([running])
        extra = suspension(suspension(running.extra, 1050.0), 8250.0)
        service._on_jobs([job(1, JobState.COMPLETED, 1000.0, 9000.0).evolve(extra=extra)])
        await settle(service, 1)
        assert predictor.seen == [(1, 800.0, JobState.COMPLETED)]
        assert reported == [("user", 100.0, 800.0)]
        assert [f.actual_s for f in service.recent_finished(10)] == [800.0]

    run_service(tmp_path, predictor, scenario)


def test_training_runs_off_the_event_loop(tmp_path: Path) -> None:
    """An observe that takes 0.5 s (a model being trained) neither delays the listener
    nor a read of a prediction: reads answer None at once instead of waiting."""
    predictor = SlowPredictor(delay=0.5)

    async def scenario(service: PredictionService) -> None:
        t0 = time.perf_counter()
        service._on_jobs([job(1, JobState.COMPLETED, 100.0, 200.0)])
        assert time.perf_counter() - t0 < 0.05
        # the worker is inside observe, holding the predictor (waited for, not assumed
        # after a fixed sleep: under load the worker may take longer to get there)
        await asyncio.to_thread(predictor.observing.wait, 5)
        t0 = time.perf_counter()
        assert service.planned_runtime(job(9, JobState.PENDING, None, None)) is None
        assert time.perf_counter() - t0 < 0.05
        await settle(service, 1)
        assert service.planned_runtime(job(9, JobState.PENDING, None, None)) == 100.0

    run_service(tmp_path, predictor, scenario)


def test_a_read_gives_up_while_another_thread_holds_the_predictor() -> None:
    shared = SharedPredictor(UserPredictor())
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with shared.lock:
            held.set()
            release.wait(5)

    worker = threading.Thread(target=hold)
    worker.start()
    held.wait(5)
    try:
        assert shared.try_planned_runtime(job(1, JobState.PENDING, None, None)) is None
    finally:
        release.set()
        worker.join()
    assert shared.try_planned_runtime(job(1, JobState.PENDING, None, None)) == 3600.0


def test_accuracy_figures() -> None:
    """MAE, Tsafrir's accuracy and the under-prediction rate; times under 1 s count as 1."""
    figures = accuracy([(100.0, 50.0), (10.0, 40.0), (0.5, 1.0)])
    assert figures == {
        "jobs": 3,
        "mae_seconds": round((50 + 30 + 0) / 3, 1),
        "accuracy": round((0.5 + 0.25 + 1.0) / 3, 4),
        "underprediction_rate": round(1 / 3, 4),
    }
    assert accuracy([]) == {"jobs": 0}


def test_estimates_follow_the_planner_and_survive_a_busy_predictor(tmp_path: Path) -> None:
    """Running: start + the prediction, corrected once outlived (100 s + the first step,
    60 s); pending: expected start + prediction, no end without a start. While the
    predictor is busy the last answer read for the job stands in; nothing for a job
    never read; nothing for an ended job."""
    predictor = SlowPredictor()

    async def scenario(service: PredictionService) -> None:
        running = job(1, JobState.RUNNING, 1000.0, None)
        assert service.estimate(running, 1050.0) == (100.0, 1100.0)
        assert service.estimate(running, 1150.0) == (160.0, 1160.0)
        pending = job(2, JobState.PENDING, None, None)
        assert service.estimate(pending, 1000.0) == (100.0, None)
        planned = pending.evolve(expected_start=2000.0)
        assert service.estimate(planned, 1000.0) == (100.0, 2100.0)
        assert service.estimate(job(3, JobState.COMPLETED, 1.0, 2.0), 1000.0) is None
        with service.predictor.lock:  # held here; the reads run on another thread
            assert await asyncio.to_thread(
                lambda: (
                    service.estimate(running, 1150.0) == (160.0, 1160.0)
                    and service.estimate(job(4, JobState.PENDING, None, None), 1.0) is None
                )
            )

    run_service(tmp_path, predictor, scenario)


def test_a_resumed_jobs_predicted_end_leaves_its_suspension_out(tmp_path: Path) -> None:
    """A job with a 1 h limit, suspended for 2 h after 100 s and resumed: its agent kills
    it at start + 1 h + 2 h, so after 3,000 s of running it is planned from its run time
    (100 s outlived: + the 3,600 s step, capped at the limit) and ends after the
    suspension, not at start + 1 h, two hours in the past. While still suspended its end
    moves with the suspension."""
    from hal.state.suspension import suspension

    async def scenario(service: PredictionService) -> None:
        running = job(1, JobState.RUNNING, 1000.0, None)
        suspended = running.evolve(
            state=JobState.SUSPENDED, extra=suspension(running.extra, 1050.0)
        )
        assert service.estimate(suspended, 5000.0) == (100.0, 5050.0)
        resumed = running.evolve(extra=suspension(suspended.extra, 8250.0))
        assert service.estimate(resumed, 11_200.0) == (3600.0, 11_800.0)

    run_service(tmp_path, SlowPredictor(), scenario)


def test_a_run_that_ends_as_the_server_starts_is_observed_once(tmp_path: Path) -> None:
    """It is both in the accounting the replay reads and reported by the listener."""
    predictor = SlowPredictor()
    done = job(1, JobState.COMPLETED, 990.0, 1000.0)
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(1)
        tx.insert_scripts([(1, "#!/bin/sh\n")])
        tx.insert_jobs([done], [1])
    store.close()

    async def scenario(service: PredictionService) -> None:
        service._on_jobs([done])
        await settle(service, 1)
        await asyncio.sleep(0.2)  # the listener's report has been handled too
        assert service._queue.qsize() == 0
        assert predictor.seen == [(1, 10.0, JobState.COMPLETED)]
        assert service.replayed == 1

    run_service(tmp_path, predictor, scenario)


def test_runs_whose_end_is_not_after_their_start_do_not_stop_the_replay(
    tmp_path: Path,
) -> None:
    """The accounting holds a run that ended at the instant it started and one whose
    end is recorded before its start (the wall clock stepped back, or the server that
    ended it runs a clock behind the one that started it). The replay met their end
    before their start and failed on the whole history (KeyError): no model from the
    accounting, no recent accuracy, at every restart."""
    history = [job(i, JobState.COMPLETED, 100.0 * i, 100.0 * i + 30.0) for i in range(1, 6)]
    history[1] = job(2, JobState.FAILED, 200.0, 200.0)
    history[3] = job(4, JobState.FAILED, 400.0, 399.5)
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(len(history))
        tx.insert_scripts([(1, "#!/bin/sh\n")])
        tx.insert_jobs(history, [1] * len(history))
    store.close()
    predictor = SlowPredictor()

    async def scenario(service: PredictionService) -> None:
        await settle(service, len(history))
        assert service.last_error == ""
        assert (service.replayed, service.observed) == (5, 5)
        assert accuracy(tuple(service.recent))["jobs"] == 5
        assert sorted(seen[:2] for seen in predictor.seen) == [
            (1, 30.0), (2, 0.0), (3, 30.0), (4, 0.0), (5, 30.0)
        ]  # fmt: skip

    run_service(tmp_path, predictor, scenario)


def test_jobs_found_running_at_start_are_planned_with_the_replayed_history(
    tmp_path: Path,
) -> None:
    """The server restarts while alice's job runs; her jobs run 100 s of the hour they
    ask for. The scheduler's first pass plans the running job before the accounting is
    replayed: knowing nothing yet, with its hour. That answer was pinned like a
    prediction the job started with, so after the replay it kept being planned to its
    limit until it ended (and the head of the queue with it). The replay's predictor
    now plans it."""
    from hal.predict import planning_predictor

    history = [job(i, JobState.COMPLETED, 100.0 * i, 100.0 * i + 100.0) for i in range(1, 4)]
    running = job(4, JobState.RUNNING, 4000.0, None)
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(4)
        tx.insert_scripts([(1, "#!/bin/sh\n")])
        tx.insert_jobs([*history, running], [1] * 4)
    store.close()

    async def main() -> None:
        cluster = Cluster(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"), HalConfig(),
                          VirtualClock(5000.0))  # fmt: skip
        await cluster.load()
        shared = SharedPredictor(planning_predictor("avg2"))
        service = PredictionService(cluster, shared)
        await service.start()  # the history is read once this coroutine yields
        try:
            assert shared.planned(running, 1000.0) == 3600.0  # the first pass
            await settle(service, len(history))
            assert service.estimate(running, 5000.0) == (1900.0, 5900.0)  # 100 s + steps
            assert shared.planned(running, 50.0) == 100.0
        finally:
            await service.stop()
            await cluster.close()

    asyncio.run(main())


def test_jobs_without_any_estimate_are_left_out_of_the_accuracy() -> None:
    """A job with no time limit and no history is planned as a year: not an estimate."""
    from hal.predict.baselines import UNLIMITED_S

    assert accuracy([(UNLIMITED_S, 5.0), (10.0, 10.0)]) == accuracy([(10.0, 10.0)])


def test_a_loaded_model_reads_the_accounts_of_the_history_replayed_into_it(
    tmp_path: Path,
) -> None:
    """Too little accounting for a model of its own (< 200 jobs): the loaded model is
    kept and the history replayed into it; its account features must then read that
    history, not the empty one of the moment it was loaded."""
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    trained = LearnedPredictor(min_train=200, retrain_every=200)
    for i in range(300):
        spec = JobSpec(user=f"u{i % 7}", script="", name="x", account="other")
        done = Job(id=i, spec=spec, time_limit_s=3600, state=JobState.COMPLETED)
        trained.observe(done, 60.0 + i)
    model = tmp_path / "predict" / "learned.json"
    trained.save(model)
    history = [
        Job(
            id=j,
            spec=JobSpec(user="alice", script="", account="proj"),
            partition="debug",
            state=JobState.COMPLETED,
            start_time=100.0 * j,
            end_time=100.0 * j + 50.0,
            time_limit_s=3600,
        )
        for j in range(1, 31)
    ]
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(len(history))
        tx.insert_scripts([(j.id, "#!/bin/sh\n") for j in history])
        tx.insert_jobs(history, [j.id for j in history])
    store.close()
    learned = LearnedPredictor()

    async def main() -> None:
        cluster = Cluster(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"), HalConfig(),
                          VirtualClock(5000.0))  # fmt: skip
        await cluster.load()
        service = PredictionService(cluster, SharedPredictor(learned), model_path=model)
        await service.start()
        try:
            await settle(service, len(history))
            assert service.model_source == "loaded"
        finally:
            await service.stop()
            await cluster.close()

    asyncio.run(main())
    probe = Job(id=99, spec=JobSpec(user="bob", script="", account="proj"), time_limit_s=3600)
    row = learned.history.features(probe)
    acct = NAMES.index("account_mean8")
    assert row[acct] == pytest.approx(np.log1p(50.0))


def test_an_outlived_learned_prediction_is_re_predicted_from_what_the_job_has_run(
    tmp_path: Path,
) -> None:
    """With ``learned`` the estimate ``hal show job`` reads for an overdue running job is
    the model's own correction (what the backfill planner plans with), not a step: the
    re-prediction the simulator makes at the instant the job outlived its plan."""
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    learned = LearnedPredictor(min_train=200, retrain_every=200, under_rate=0.5)
    rng = random.Random(1)
    for i in range(1200):  # 2 min or 2 h as the name says, ±10 %
        kind = rng.choice(("short", "long"))
        spec = JobSpec(user=f"u{rng.randrange(20)}", script="", name=kind, ntasks=4)
        done = Job(id=i, spec=spec, time_limit_s=36_000, state=JobState.COMPLETED)
        learned.observe(done, (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1))
    spec = JobSpec(user="u3", script="", name="long", ntasks=4)
    running = Job(id=5_000, spec=spec, partition="debug", state=JobState.RUNNING,
                  start_time=1000.0, time_limit_s=36_000)  # fmt: skip

    async def scenario(service: PredictionService) -> None:
        runtime, end = service.estimate(running, 1000.0) or (0.0, None)
        assert 1000 < runtime < 20_000 and end == 1000.0 + runtime  # learned, not 10 h
        elapsed = runtime * 1.02
        again, end = service.estimate(running, 1000.0 + elapsed) or (0.0, None)
        assert again == learned.extended(running, runtime, runtime)
        assert again != runtime + 60.0  # not Tsafrir's first step
        assert elapsed < again < 36_000 and end == 1000.0 + again

    run_service(tmp_path, PinnedPredictor(learned, correction="model"), scenario)  # type: ignore[arg-type]


def _trained_service(
    tmp_path: Path,
) -> tuple[LearnedPredictor, SharedPredictor, Path, PredictionService]:
    """A learned model trained on 300 ends, the predictor sharing it, the file it is
    saved to and the service that saves it there."""
    trained = LearnedPredictor(min_train=200, retrain_every=200)
    for i in range(300):
        spec = JobSpec(user=f"u{i % 7}", script="", name="x", account="other")
        trained.observe(Job(id=i, spec=spec, time_limit_s=3600, state=JobState.COMPLETED), 60.0 + i)
    shared = SharedPredictor(trained)
    model = tmp_path / "predict" / "learned.json"
    cluster = Cluster(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"), HalConfig(),
                      VirtualClock(1000.0))  # fmt: skip
    return trained, shared, model, PredictionService(cluster, shared, model_path=model)


def test_a_model_is_written_with_the_predictor_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saved model is made under the predictor's lock and written after letting go
    of it: a pass's backfill stage (which holds it) does not wait for the disk."""
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    from hal.predict.learned import write_model

    trained, shared, model, service = _trained_service(tmp_path)
    held: list[bool] = []

    def probe() -> None:
        free = shared.lock.acquire(blocking=False)
        if free:
            shared.lock.release()
        held.append(not free)

    def watched(path: Path, text: str) -> None:
        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        write_model(path, text)

    monkeypatch.setattr("hal.server.predictions.write_model", watched)
    service._save()
    assert held == [False] and model.exists()
    loaded = LearnedPredictor()
    assert loaded.load(model) and loaded.model_version == trained.model_version


def test_a_model_retrained_live_is_written_with_the_predictor_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's end that retrains the model saves it once ``_finish`` has let go of the
    predictor's lock (re-entrant: a save inside its hold would still hold it)."""
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    from hal.predict.learned import write_model

    trained, shared, model, service = _trained_service(tmp_path)
    held: list[bool] = []

    def watched(path: Path, text: str) -> None:
        free = [False]

        def probe() -> None:
            free[0] = shared.lock.acquire(blocking=False)
            if free[0]:
                shared.lock.release()

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        held.append(not free[0])
        write_model(path, text)

    monkeypatch.setattr("hal.server.predictions.write_model", watched)
    version = trained.model_version
    for i in range(300, 420):  # (the next retrain is at 400 observed)
        spec = JobSpec(user=f"u{i % 7}", script="", name="x", account="other")
        job = Job(id=i, spec=spec, time_limit_s=3600, state=JobState.COMPLETED)
        service._finish(dataclasses.replace(job, start_time=0.0, end_time=60.0 + i))
    assert trained.model_version > version
    assert held and not any(held) and model.exists()
