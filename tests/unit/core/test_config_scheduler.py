"""``[scheduler]`` in hal.toml: server settings beside the profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.api.server import HalServer
from hal.config.model import HalConfig, config_from_dict
from hal.core.errors import InvalidRequest
from hal.scheduler.framework import ProfileError
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.server.control_plane import predictor_name, sqlite_dir
from hal.server.profile import server_profile


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


def test_the_correction_defaults_to_the_predictors_own_and_names_its_field() -> None:
    """``[scheduler] correction``: the expiry correction the server plans with, the
    names ``hal sim run --correction`` takes; the config plane keeps its own list of
    them (it does not import the predictors), equal to ``hal.predict``'s."""
    from hal.config.model import CORRECTIONS, PREDICTORS
    from hal.predict import CONFIGURABLE
    from hal.predict import CORRECTIONS as PREDICT_CORRECTIONS

    assert HalConfig().scheduler_correction == "default"
    config = config_from_dict({"scheduler": {"predictor": "avg2", "correction": "request"}})
    assert (config.scheduler_predictor, config.scheduler_correction) == ("avg2", "request")
    assert config.scheduler_profile == {}
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"scheduler": {"correction": "sometimes"}})
    assert err.value.field == "scheduler.correction"
    assert "default, steps, request, model" in err.value.message
    assert CORRECTIONS == PREDICT_CORRECTIONS and PREDICTORS == CONFIGURABLE


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


LIMITED_QOS = {"qos": [{"name": "normal", "max_jobs_per_user": 2}]}
PREEMPTING = {"preemption": {"type": "qos"}}


def test_without_a_scheduler_table_the_profile_follows_the_config() -> None:
    profile = server_profile(config_from_dict({**LIMITED_QOS, **PREEMPTING}))
    plugins = profile["plugins"]
    assert isinstance(plugins, list)
    assert "limits" in plugins and "preemption" in plugins


def test_plugin_args_alone_tune_the_default_profile_and_keep_its_plugins() -> None:
    """A [scheduler] table that only sets plugin_args keeps limits and preemption, and
    merges its arguments over the default ones key by key."""
    raw = {
        **LIMITED_QOS,
        **PREEMPTING,
        "scheduler": {
            "plugin_args": {"backfill": {"window_s": 3600, "partitions": {"long": "conservative"}}},
            "score_weights": {"noderesources": 3},
        },
    }
    config = config_from_dict(raw)
    profile = server_profile(config)
    expected = server_profile(config_from_dict({**LIMITED_QOS, **PREEMPTING}))
    assert profile["plugins"] == expected["plugins"]
    args = profile["plugin_args"]
    assert isinstance(args, dict)
    assert args["backfill"] == {"window_s": 3600, "partitions": {"long": "conservative"}}
    assert args["noderesources"] == {"score": "best_fit"}  # the default's, kept
    # merged too
    assert profile["score_weights"] == {
        "noderesources": 3,
        "nvlink": 2.0,
        "affinity": 3.0,
        "harmonic": 2.0,
        "dissonance": 2.0,
    }
    backfill = build_scheduler(profile, default_registry(policy=config.priority)).profile.backfill
    assert backfill is not None
    long, other = backfill.policy_for("long"), backfill.policy_for("batch")
    assert long is not None and other is not None
    assert (long.mode.value, other.mode.value, other.window_s) == ("conservative", "easy", 3600)


def test_a_plugin_argument_merges_into_the_defaults_own() -> None:
    profile = server_profile(
        config_from_dict({"scheduler": {"plugin_args": {"noderesources": {"score": "spread"}}}})
    )
    args = profile["plugin_args"]
    assert isinstance(args, dict)
    assert args["noderesources"] == {"score": "spread"}
    assert "backfill" in args  # the other defaults stay


def test_an_unknown_key_beside_plugin_args_is_still_refused() -> None:
    with pytest.raises(InvalidRequest) as err:  # when the config loads, naming the table
        config_from_dict({"scheduler": {"plugin_arg": {}}})
    assert err.value.field == "scheduler.plugin_arg"
    with pytest.raises(ProfileError) as err:  # and by the framework, for other callers
        build_scheduler({"plugin_arg": {}})
    assert err.value.field == "plugin_arg"


CUSTOM = ["priority", "partition", "noderesources"]


@pytest.mark.parametrize(
    ("raw", "missing"),
    [
        (LIMITED_QOS, "'limits'"),
        (PREEMPTING, "'preemption'"),
        (
            {"accounts": [{"name": n, "grp_tres": {"cpus": 8}, "cohort": "c"} for n in "ab"]},
            "'preemption'",
        ),
        ({"licenses": {"matlab": 4}}, "'licenses'"),
    ],
)
def test_a_plugins_list_that_drops_an_enforcer_stops_start_up(
    raw: dict[str, object], missing: str
) -> None:
    config = config_from_dict({**raw, "scheduler": {"plugins": CUSTOM}})
    with pytest.raises(ProfileError) as err:
        server_profile(config)
    assert err.value.field == "scheduler.plugins"
    assert missing in str(err.value)
    assert "drop 'plugins'" in str(err.value)


def test_a_plugins_list_with_the_enforcers_is_taken_as_written() -> None:
    plugins = [*CUSTOM[:2], "limits", CUSTOM[2], "preemption"]
    config = config_from_dict({**LIMITED_QOS, **PREEMPTING, "scheduler": {"plugins": plugins}})
    assert server_profile(config) == {"plugins": plugins}
    # without limits or preemption configured any list is the operator's choice
    assert server_profile(config_from_dict({"scheduler": {"plugins": CUSTOM}})) == {
        "plugins": CUSTOM
    }


def test_the_server_schedules_with_it(tmp_path: Path) -> None:
    """HalServer builds its scheduler from ``server_profile``: tuned, or refused."""
    db = f"sqlite:///{tmp_path / 'hal.db'}"
    tuned = {"scheduler": {"plugin_args": {"backfill": {"mode": "conservative"}}}}
    server = HalServer(config_from_dict({**LIMITED_QOS, **tuned}), db)
    names = [p.name for p in server.scheduler.profile.pre_filter]
    assert "limits" in names
    backfill = server.scheduler.profile.backfill
    assert backfill is not None
    policy = backfill.policy_for("debug")
    assert policy is not None and policy.mode.value == "conservative"
    server.store.close()
    with pytest.raises(ProfileError, match="leaves out 'limits'"):
        HalServer(config_from_dict({**LIMITED_QOS, "scheduler": {"plugins": CUSTOM}}), db)


def test_licenses_add_their_plugin_and_are_checked() -> None:
    """``[licenses]`` puts the licenses plugin in the default profile; names and counts
    are checked at start with the key named."""
    plugins = server_profile(config_from_dict({"licenses": {"matlab": 4}}))["plugins"]
    assert isinstance(plugins, list) and "licenses" in plugins
    assert "licenses" not in (server_profile(HalConfig())["plugins"] or [])
    for raw, field in [
        ({"licenses": 3}, "licenses"),
        ({"licenses": {"two words": 1}}, "licenses.two words"),
        ({"licenses": {"matlab": -1}}, "licenses.matlab"),
    ]:
        with pytest.raises(InvalidRequest) as err:
            config_from_dict(raw)
        assert err.value.field == field
