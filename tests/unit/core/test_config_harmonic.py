"""``[harmonic]`` in hal.toml: the traffic graph's half-life and bounds, their defaults,
the units a half-life takes, and refusals that name the key."""

from __future__ import annotations

import pytest

from hal.config.harmonic import HarmonicConfig
from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest


def test_defaults_without_the_table() -> None:
    assert config_from_dict({}).harmonic == HarmonicConfig(3600.0, 32, 4096)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1h", 3600.0), ("90s", 90.0), ("30min", 1800.0), ("2d", 172_800.0), ("15m", 900.0),
     ("3 hours", 10_800.0), ("1.5h", 5400.0), (600, 600.0), (2.5, 2.5)],
)  # fmt: skip
def test_a_half_life_takes_seconds_or_a_unit(value: object, seconds: float) -> None:
    assert config_from_dict({"harmonic": {"half_life": value}}).harmonic.half_life_s == seconds


def test_bounds_are_taken() -> None:
    config = config_from_dict({"harmonic": {"max_peers": 8, "max_identities": 100}}).harmonic
    assert (config.max_peers, config.max_identities) == (8, 100)


@pytest.mark.parametrize(
    ("table", "field", "words"),
    [
        ({"half_life": "1ms"}, "harmonic.half_life", '"90s", "30min", "1h", "2d"'),
        ({"half_life": "soon"}, "harmonic.half_life", "is not a duration"),
        ({"half_life": 0}, "harmonic.half_life", "at least 1 second"),
        ({"half_life": True}, "harmonic.half_life", "is not a duration"),
        ({"half_life": float("nan")}, "harmonic.half_life", "at least 1 second"),
        ({"max_peers": 0}, "harmonic.max_peers", ">= 1"),
        ({"max_peers": 5000}, "harmonic.max_peers", "at most 1024"),
        ({"max_identities": "many"}, "harmonic.max_identities", "whole number"),
        ({"max_identities": 10**7}, "harmonic.max_identities", "at most 1000000"),
        ({"halflife": "1h"}, "harmonic.halflife", "did you mean"),
    ],
)
def test_bad_values_are_refused_naming_the_key(
    table: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"harmonic": table}, source="hal.toml")
    assert err.value.field == field
    assert f"hal.toml: {field}" in err.value.message and words in err.value.message


def test_the_table_must_be_a_table() -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"harmonic": "1h"})
    assert err.value.field == "harmonic"
