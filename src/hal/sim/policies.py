"""The simulator's policies, each a scheduler profile built by the same factory the server
uses (``build_profile`` over the default registry): the simulation runs the real plugins.

The backfilling policies use the literature's settings rather than Slurm's defaults:
plan without a window, at one-second resolution, test every queued job, and backfill at
every scheduling event (bf_interval 0). One setting is HAL's own: once the first blocked
job has waited a week, jobs backfilled in front of it are planned to their time limit
(``protect_after_s``; no effect with the ``user`` predictor). The server's default is a
day; on SDSC-SP2, where EASY itself keeps jobs waiting for days, a day took most of
``learned``'s gain (mean bsld 61.0 without the guard, 73.8 with a day, 64.9 with three
days, 61.04 with a week), while without any guard CEA-Curie's widest jobs waited 42 days.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hal.core.errors import InvalidRequest
from hal.predict import Predictor
from hal.scheduler.framework.profile import build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import backfill, default_profile, default_registry

POLICIES = ("fcfs", "easy", "conservative", "easy-sjbf")

_BACKFILL_ARGS: dict[str, dict[str, object]] = {
    "easy": {"mode": "easy"},
    "conservative": {"mode": "conservative"},
    "easy-sjbf": {"mode": "easy", "order": "shortest"},
}
_LITERATURE = {
    "window_s": 0,
    "resolution_s": 1,
    "max_job_test": 0,
    "interval_s": 0,
    "protect_after_s": 7 * 86_400,
}


def profile_config(policy: str, **profile: Any) -> dict[str, object]:
    """The scheduler profile (as a config mapping) for ``policy``; ``profile``: more
    ``default_profile`` arguments (e.g. ``data=True``)."""
    if policy not in POLICIES:
        raise InvalidRequest(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    # The simulator places on a tree only with --topology (sim/topology.py adds the
    # plugin then); its default nodes carry synthetic switch paths that plain runs ignore.
    config = default_profile(backfill=False, topology_aware=False, **profile)
    if policy in _BACKFILL_ARGS:
        plugins = config["plugins"]
        assert isinstance(plugins, list)
        plugins.append(backfill.NAME)
        args = config["plugin_args"]
        assert isinstance(args, dict)
        args[backfill.NAME] = {**_BACKFILL_ARGS[policy], **_LITERATURE}
    return config


def scheduler_for(policy: str, predictor: Predictor) -> Scheduler:
    """The scheduler for ``policy``, planning with ``predictor``'s run times."""
    config = profile_config(policy)
    profile = build_profile(config, default_registry())
    if profile.backfill is not None:
        # The simulator hands the plugin its own predictor (e.g. ``perfect``, which needs
        # the trace's true run times and cannot be named in a config).
        plugin_args = config["plugin_args"]
        assert isinstance(plugin_args, dict)
        profile = replace(profile, backfill=backfill.new(plugin_args[backfill.NAME], predictor))
    return Scheduler(profile)
