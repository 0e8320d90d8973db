"""``[scheduler]`` in hal.toml: server settings beside the profile."""

from __future__ import annotations

import pytest

from hal.api.server import predictor_name, sqlite_dir
from hal.config.model import HalConfig, config_from_dict
from hal.core.errors import InvalidRequest
from hal.scheduler.plugins import default_profile


def test_the_predictor_defaults_to_learned_and_is_not_part_of_the_profile() -> None:
    assert HalConfig().scheduler_predictor == "learned"
    config = config_from_dict({"scheduler": {"predictor": "avg2", "interval_seconds": 2}})
    assert config.scheduler_predictor == "avg2"
    assert config.scheduler_interval_seconds == 2.0
    assert config.scheduler_profile == {}  # nothing left: the default profile


def test_an_unknown_predictor_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"scheduler": {"predictor": "perfect"}})
    assert err.value.field == "scheduler.predictor"


def test_the_backfill_plugins_own_predictor_argument_wins() -> None:
    config = HalConfig(scheduler_predictor="avg2")
    profile = default_profile()
    assert predictor_name(profile, config) == "avg2"
    profile["plugin_args"] = {"backfill": {"predictor": "user"}}
    assert predictor_name(profile, config) == "user"
    profile["plugin_args"] = {"backfill": {"predictor": "nonsense"}}  # the plugin refuses it
    assert predictor_name(profile, config) == "avg2"


def test_the_model_lives_beside_a_sqlite_database_only() -> None:
    assert str(sqlite_dir("sqlite:////var/lib/hal/hal.db")) == "/var/lib/hal"
    assert sqlite_dir("postgresql://hal@db/hal") is None
    assert sqlite_dir("sqlite://") is None
