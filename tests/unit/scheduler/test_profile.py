"""Profiles from plain config: the default builds; every mistake names its field."""

from __future__ import annotations

from typing import Any

import pytest

from hal.scheduler.framework import ProfileError
from hal.scheduler.plugins import DEFAULT_PLUGINS, build_scheduler, default_profile


def test_default_profile_wires_every_point() -> None:
    """The default profile puts each plugin at the points it implements, in order."""
    profile = build_scheduler().profile
    assert profile.queue_sort.name == "priority"
    assert [p.name for p in profile.pre_filter] == [*DEFAULT_PLUGINS[1:], "topology"]
    assert profile.placement_generate is not None
    assert profile.placement_generate.name == "topology"
    assert [p.name for p in profile.filter] == [
        "partition",
        "reservation",
        "noderesources",
        "exclusiveuser",
        "nvlink",
        "affinity",
    ]
    assert [(p.name, w) for p, w in profile.score] == [
        ("noderesources", 1.0),
        ("nvlink", 2.0),
        ("affinity", 3.0),
        ("harmonic", 2.0),
        ("dissonance", 2.0),
    ]
    assert [p.name for p in profile.pre_score] == [
        "nvlink",
        "affinity",
        "harmonic",
    ]  # (dissonance: its Score says when it skips, ``WeightedScorer``)
    assert [p.name for p in profile.reserve] == [
        "dependency",
        "arraythrottle",
        "exclusiveuser",
        "affinity",
        "harmonic",
        "dissonance",
    ]
    assert profile.backfill is not None and profile.backfill.name == "backfill"


@pytest.mark.parametrize("name", ["user", "avg2", "learned"])
def test_backfill_builds_the_predictor_its_args_name(name: str) -> None:
    config = default_profile()
    config["plugin_args"] = {"backfill": {"predictor": name}}
    plugin = build_scheduler(config).profile.backfill
    assert plugin is not None
    assert plugin.predictor.name == name  # type: ignore[attr-defined]


def test_an_injected_predictor_must_match_the_name_in_the_args() -> None:
    """The server hands the plugin its shared predictor; a profile naming another one is
    a configuration mistake, not something to ignore."""
    from hal.predict import Avg2Predictor
    from hal.scheduler.plugins import default_registry

    config = default_profile()
    registry = default_registry(predictor=Avg2Predictor())
    plugin = build_scheduler(config, registry).profile.backfill
    assert plugin is not None and plugin.predictor.name == "avg2"  # type: ignore[attr-defined]
    config["plugin_args"] = {"backfill": {"predictor": "learned"}}
    with pytest.raises(ProfileError) as err:
        build_scheduler(config, registry)
    assert err.value.field == "plugin_args.backfill.predictor"


def _with(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = default_profile()
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    return config


# (situation, config, field named in the error)
CASES: list[tuple[str, object, str]] = [
    ("not a table", ["priority"], "scheduler"),
    ("unknown top-level key", _with(plugin=["x"]), "plugin"),
    ("no plugins", _with(plugins=[]), "plugins"),
    ("plugins missing", _with(plugins=None), "plugins"),
    ("plugins as a string", _with(plugins="priority"), "plugins"),
    ("unknown plugin", _with(plugins=["priority", "fairshare"]), "plugins[1]"),
    ("plugin listed twice", _with(plugins=["priority", "hold", "hold"]), "plugins[2]"),
    ("non-string plugin", _with(plugins=["priority", 3]), "plugins[1]"),
    (
        "no queue sort",
        _with(plugins=["hold", "noderesources"], score_weights={}, plugin_args={}),
        "plugins",
    ),
    ("weight for a non-score plugin", _with(score_weights={"hold": 1}), "score_weights.hold"),
    ("zero weight", _with(score_weights={"noderesources": 0}), "score_weights.noderesources"),
    (
        "string weight",
        _with(score_weights={"noderesources": "high"}),
        "score_weights.noderesources",
    ),
    (
        "args for a plugin not enabled",
        _with(plugin_args={"fairshare": {}}),
        "plugin_args.fairshare",
    ),
    ("args not a table", _with(plugin_args={"noderesources": 3}), "plugin_args.noderesources"),
    (
        "unknown plugin argument",
        _with(plugin_args={"noderesources": {"scroe": "x"}}),
        "plugin_args.noderesources.scroe",
    ),
    (
        "bad argument value",
        _with(plugin_args={"noderesources": {"score": "worst_fit"}}),
        "plugin_args.noderesources.score",
    ),
    ("empty name", _with(name=""), "name"),
    (
        "a predictor only a simulator has",
        _with(plugin_args={"noderesources": {}, "backfill": {"predictor": "perfect"}}),
        "plugin_args.backfill.predictor",
    ),
]


@pytest.mark.parametrize(("situation", "config", "field"), CASES, ids=[c[0] for c in CASES])
def test_invalid_profile_names_the_field(situation: str, config: Any, field: str) -> None:
    """An operator's config mistake stops start-up with the culprit named."""
    with pytest.raises(ProfileError) as err:
        build_scheduler(config)
    assert err.value.field == field
    assert err.value.code == "invalid_profile"


def test_profile_error_is_an_invalid_request() -> None:
    """ProfileError sits in the HalError tree (400, names the field)."""
    from hal.core.errors import InvalidRequest

    assert issubclass(ProfileError, InvalidRequest)


@pytest.mark.parametrize(
    ("config", "hint"),
    [
        (_with(plugin_args={"noderesources": {"scroe": "x"}}), "'score'"),
        (_with(plugin=["x"]), "'plugins'"),
        (_with(plugins=["priority", "noderesource"]), "'noderesources'"),
    ],
)
def test_a_typo_names_the_word_it_is_close_to(config: Any, hint: str) -> None:
    with pytest.raises(ProfileError) as err:
        build_scheduler(config)
    assert f"(did you mean {hint}?)" in err.value.message
