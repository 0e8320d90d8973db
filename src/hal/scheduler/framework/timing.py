"""Per-plugin timing for sampled passes (``hal_scheduler_plugin_duration_seconds``).

Timing every plugin call costs two clock reads and a dict update per call, tens of
thousands of times in a large pass, so the scheduler does it only when asked: the server
asks for one pass in every ``HAL_PLUGIN_TIMING_INTERVAL_S`` seconds (``PacedScheduler``).
A timed pass runs the same plugin objects, each behind a ``_Timed`` proxy that adds the
wall time of every method call to ``PluginTimes`` under (plugin, extension point), named
as kube-scheduler names them (``Filter``, ``Score``, ``Reserve``, ...). A plugin
that calls back into the framework (preemption's what-if placements) includes the time of
the plugins it calls: the figures are inclusive, like a profiler's cumulative time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from time import perf_counter
from typing import Any, TypeVar, cast

from hal.scheduler.framework.profile import Profile

T = TypeVar("T")

# (plugin name, extension point) → seconds spent in it during one pass
PluginTimes = dict[tuple[str, str], float]

# plugin method → the extension point it serves (interfaces.py)
EXTENSION_POINTS = {
    "sort_key": "QueueSort",
    "pre_filter": "PreFilter",
    "lets_through": "PreFilter",  # (``PreFilterWaiver``, beside it)
    "filter": "Filter",
    "post_filter": "PostFilter",
    "pre_score": "PreScore",
    "score": "Score",
    "weighted_score": "Score",  # (``WeightedScorer``: called instead of ``score``)
    "normalize_scores": "Score",
    "reserve": "Reserve",
    "unreserve": "Reserve",
    "permit": "Permit",
    "generate": "PlacementGenerate",
    "score_placement": "PlacementScore",
    "policy_for": "Backfill",
    "prepare": "Backfill",
    "runtime": "Backfill",
    "fixed_runtimes": "Backfill",
    "counts": "CountedResource",
}


class _Timed:
    """``inner`` with every public method call timed into ``times``. Attributes that are
    not methods (``name``, ``interval_s``) are read through unchanged."""

    def __init__(self, inner: object, times: PluginTimes) -> None:
        self._inner = inner
        self._times = times
        self.name: str = cast(Any, inner).name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr.startswith("_") or not callable(value):
            return value
        key, times = (self.name, EXTENSION_POINTS.get(attr, attr)), self._times
        method = cast(Callable[..., Any], value)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                times[key] = times.get(key, 0.0) + perf_counter() - start

        setattr(self, attr, timed)  # found once; later calls skip __getattr__
        return timed


def unwrapped(plugin: T) -> T:
    """The plugin behind a ``_Timed`` proxy, else ``plugin``: the object to check a
    runtime Protocol against (from Python 3.12 ``isinstance`` looks methods up with
    ``inspect.getattr_static``, which does not see the proxy's ``__getattr__``); the
    calls still go through the proxy, which times them."""
    if isinstance(plugin, _Timed):
        return cast(T, plugin._inner)
    return plugin


def timed_profile(profile: Profile, times: PluginTimes) -> Profile:
    """``profile`` with each plugin behind a ``_Timed`` proxy writing to ``times`` (one
    proxy per plugin object, so a plugin at several extension points stays one object)."""
    proxies: dict[int, Any] = {}

    def wrap(plugin: Any) -> Any:
        if plugin is None:
            return None
        if id(plugin) not in proxies:
            proxies[id(plugin)] = _Timed(plugin, times)
        return proxies[id(plugin)]

    return dataclasses.replace(
        profile,
        queue_sort=wrap(profile.queue_sort),
        pre_filter=tuple(wrap(p) for p in profile.pre_filter),
        filter=tuple(wrap(p) for p in profile.filter),
        post_filter=tuple(wrap(p) for p in profile.post_filter),
        pre_score=tuple(wrap(p) for p in profile.pre_score),
        score=tuple((wrap(p), w) for p, w in profile.score),
        reserve=tuple(wrap(p) for p in profile.reserve),
        permit=tuple(wrap(p) for p in profile.permit),
        backfill=wrap(profile.backfill),
        placement_generate=wrap(profile.placement_generate),
        placement_score=tuple(wrap(p) for p in profile.placement_score),
        counted=tuple(wrap(p) for p in profile.counted),
    )
