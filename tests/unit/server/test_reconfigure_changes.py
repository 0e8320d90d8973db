"""What a reconfigure reports and keeps: the hal.toml keys that changed, and the settings
bound at start that it leaves as they run (``hal.server.reconfigure``)."""

from __future__ import annotations

import dataclasses

from hal.config.model import HalConfig, config_from_dict
from hal.server.reconfigure import (
    LIVE,
    RESTART_ONLY,
    added_partitions,
    config_changes,
    removed_partitions,
    restart_only,
)

BASE = {
    "partitions": [
        {"name": "debug", "default": True, "max_time": 60},
        {"name": "old"},
    ],
    "licenses": {"matlab": 2},
}


def _config(**changes: object) -> HalConfig:
    return config_from_dict({**BASE, **changes})


def _predictor(config: HalConfig) -> str:
    return config.scheduler_predictor


def test_the_changed_keys_are_named_as_hal_toml_names_them() -> None:
    new = _config(
        partitions=[{"name": "debug", "default": True, "max_time": 20}, {"name": "new"}],
        licenses={"matlab": 3, "abaqus": 1},
        min_job_age_seconds=10,
        scheduler={"interval_seconds": 2.0},
        priority={"weight_age": 100},
        accounts=[{"name": "physics"}],
    )
    running = _config()
    assert config_changes(running, new) == [
        "min_job_age_seconds",
        "scheduler.interval_seconds",
        "partitions.debug.max_time",
        "partitions.old",
        "partitions.new",
        "priority",
        "accounts",
        "licenses.abaqus",
        "licenses.matlab",
    ]
    assert removed_partitions(running, new) == ["old"]
    assert added_partitions(running, new) == ["new"]
    assert config_changes(running, _config()) == []


def test_settings_bound_at_start_are_kept_and_named() -> None:
    running = _config()
    new = _config(
        cluster_name="other",
        heartbeat_interval_seconds=1.0,
        scheduler={"predictor": "user", "correction": "request", "interval_seconds": 3.0},
    )
    taken, kept = restart_only(running, new, _predictor)
    assert kept == [
        "cluster_name",
        "heartbeat_interval_seconds",
        "scheduler.predictor",
        "scheduler.correction",
    ]
    assert taken.scheduler_correction == running.scheduler_correction == "default"
    assert taken.cluster_name == "hal"
    assert taken.heartbeat_interval_seconds == running.heartbeat_interval_seconds
    assert taken.scheduler_predictor == running.scheduler_predictor
    assert taken.scheduler_interval_seconds == 3.0  # not bound at start: taken
    assert config_changes(running, taken) == ["scheduler.interval_seconds"]


def test_a_backfill_predictor_argument_is_named_when_it_alone_changes() -> None:
    def by_args(config: HalConfig) -> str:
        args = config.scheduler_profile.get("plugin_args", {})
        return str(args.get("backfill", {}).get("predictor", config.scheduler_predictor))

    new = _config(scheduler={"plugin_args": {"backfill": {"predictor": "avg2"}}})
    _, kept = restart_only(_config(), new, by_args)
    assert kept == ["scheduler.plugin_args.backfill.predictor"]


def test_every_setting_is_either_taken_live_or_kept_until_a_restart() -> None:
    """A new hal.toml setting must be classified (ADR 0014): else a reconfigure would
    take it into a config no part of the server reads again, silently."""
    fields = {f.name for f in dataclasses.fields(HalConfig)}
    assert not LIVE & set(RESTART_ONLY)
    assert fields == LIVE | set(RESTART_ONLY)
