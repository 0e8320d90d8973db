"""The runtime's ``WeightedScorer`` contract: only such a plugin may say None (no
opinion) or give a 0-d score, any other Score plugin that does is named in a clear
error; and a sampled (timed) pass, whose plugins sit behind a timing proxy, still calls
``weighted_score`` (on Python 3.12+ isinstance against a runtime Protocol does not see
the proxy's methods)."""

from __future__ import annotations

import numpy as np
import pytest

from hal.core.job import Job
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import FloatArray, IndexArray, WeightedScorer
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.framework.timing import EXTENSION_POINTS, timed_profile, unwrapped
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import cluster, make_job


class _Says:
    """A Score plugin (not a WeightedScorer) whose ``score`` gives ``answer``."""

    def __init__(self, answer: FloatArray | None) -> None:
        self.name = "says"
        self.answer = answer

    def score(
        self, ctx: PassContext, state: CycleState, job: Job, r: NodeRequest, f: IndexArray
    ) -> FloatArray | None:
        return self.answer


class _Opinionless:
    """A WeightedScorer with no opinion on any job; its plain ``score`` must not be
    called (the runtime calls ``weighted_score`` instead)."""

    name = "opinionless"

    def __init__(self) -> None:
        self.calls = 0

    def score(
        self, ctx: PassContext, state: CycleState, job: Job, r: NodeRequest, f: IndexArray
    ) -> FloatArray:
        raise AssertionError("score called instead of weighted_score")

    def weighted_score(
        self,
        weight: float,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        r: NodeRequest,
        f: IndexArray,
    ) -> FloatArray | None:
        self.calls += 1
        return None


def _with(plugin: _Says | _Opinionless) -> Scheduler:
    registry = default_registry()
    registry.register(plugin.name, lambda args: plugin)
    config = default_profile()
    plugins = config["plugins"]
    assert isinstance(plugins, list)
    plugins.append(plugin.name)
    return build_scheduler(config, registry)


def _snapshot() -> ClusterSnapshot:
    pending = [make_job(k).cpus(2) for k in range(1, 4)]
    return cluster().uniform_nodes(3, cpus=8).pending(*pending).build()


@pytest.mark.parametrize(
    ("answer", "words"),
    [(None, "returned None"), (np.array(50.0), "returned a 0-d array")],
)
def test_only_a_weighted_scorer_may_say_none_or_give_a_0d_score(
    answer: FloatArray | None, words: str
) -> None:
    """(Before the ``WeightedScorer`` contract a None failed on ``.shape``, a 0-d array
    was refused: now the error says which plugin and what it may not do.)"""
    result = _with(_Says(answer)).run_pass(_snapshot())
    assert not result.plan.placements
    for status in result.statuses.values():  # (the pass keeps going: each job's error)
        assert status.plugin == "says"
        assert status.message.startswith(f"ValueError: Score plugin 'says' {words}")
        assert "WeightedScorer" in status.message


def test_a_sampled_pass_still_calls_weighted_score() -> None:
    plugin = _Opinionless()
    scheduler = _with(plugin)
    for timed in (False, True):
        plugin.calls = 0
        result = scheduler.run_pass(_snapshot(), time_plugins=timed)
        assert len(result.plan.placements) == 3
        assert plugin.calls > 0
    assert ("opinionless", "Score") in (result.plugin_seconds or {})
    assert EXTENSION_POINTS["weighted_score"] == "Score"
    proxy = timed_profile(scheduler.profile, {}).score[-1][0]
    assert unwrapped(proxy) is plugin
    assert isinstance(unwrapped(proxy), WeightedScorer)
