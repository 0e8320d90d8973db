"""``[harmonic]``'s keys for the feedback loop (resizing malleable jobs, moving clashing
ones): their defaults are the loop's own, durations take units, bad values are refused
naming the key; and a ``--malleable`` job's range survives the store."""

from __future__ import annotations

import pytest

from hal.api.convert import to_spec
from hal.compat.sbatch import parse_sbatch
from hal.config import harmonic
from hal.config.model import config_from_dict
from hal.core import malleable
from hal.core.errors import InvalidRequest
from hal.state.codec import spec_from_json, spec_to_json


def test_the_defaults_are_the_controller_s() -> None:
    loop = config_from_dict({}).harmonic
    assert loop.resize_min_gain == malleable.MIN_GAIN == harmonic.RESIZE_MIN_GAIN
    assert loop.resize_interval_s == malleable.MIN_INTERVAL_S
    assert (loop.feedback_tick_s, loop.move_interval_s) == (30.0, 1800.0)


def test_the_keys_are_taken() -> None:
    table = {
        "feedback_tick": "5s",
        "resize_interval": "2min",
        "resize_min_gain": 0.25,
        "move_interval": "1h",
    }
    loop = config_from_dict({"harmonic": table}).harmonic
    assert (loop.feedback_tick_s, loop.resize_interval_s) == (5.0, 120.0)
    assert (loop.resize_min_gain, loop.move_interval_s) == (0.25, 3600.0)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"resize_min_gain": -0.1}, "harmonic.resize_min_gain"),
        ({"resize_min_gain": "much"}, "harmonic.resize_min_gain"),
        ({"resize_min_gain": True}, "harmonic.resize_min_gain"),
        ({"move_interval": "soon"}, "harmonic.move_interval"),
        ({"feedback_tick": 0}, "harmonic.feedback_tick"),
    ],
)
def test_bad_values_are_refused_naming_the_key(table: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"harmonic": table}, source="hal.toml")
    assert err.value.field == field


def test_a_malleable_range_from_sbatch_survives_the_store() -> None:
    script = "#!/bin/sh\n#SBATCH --cpus-per-task=4-16\n#HAL --malleable\ntrue\n"
    req = parse_sbatch([], environ={}, cwd="/w", read_stdin=lambda: script, now=0.0).job
    spec = to_spec(req, "ann", max_array_size=10)
    assert spec.malleable == malleable.MalleableRange(malleable.CPUS, 4, 16)
    assert spec.cpus_per_task == 4
    assert spec_from_json(spec_to_json(spec), spec.script).malleable == spec.malleable
    plain = to_spec(
        parse_sbatch([], environ={}, cwd="/w", read_stdin=lambda: "#!/bin/sh\n", now=0.0).job,
        "ann",
        max_array_size=10,
    )
    assert spec_from_json(spec_to_json(plain), plain.script).malleable is None
