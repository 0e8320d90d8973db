"""``[harmonic]`` of ``hal.toml``: the traffic graph the control plane keeps of who talks to
whom (``hal.server.traffic``, docs/harmonic.md).

Example (the defaults)::

    [harmonic]                     # optional; the graph is kept with these defaults
    half_life = "1h"               # what was measured counts half as much this much later
    max_peers = 32                 # edges kept per workload (and per running job)
    max_identities = 4096          # workloads kept in all; past it the weakest go
    weight = 2.0                   # the harmonic score plugin's weight (0: plugin off)
    feedback_tick = "30s"          # how often the feedback loop looks (resizes, moves)
    resize_interval = "10min"      # a malleable job is resized at most this often
    resize_min_gain = 0.1          # ... and only for at least this share more speedup
    move_interval = "30min"        # a job is moved off a clashing neighbour at most this often

``half_life`` is a number of seconds or a number and a unit: ``"90s"``, ``"30min"``,
``"1h"``, ``"2d"`` (``m`` is minutes). The bounds keep the graph under
``max_identities * max_peers / 2`` workload edges (65,536 by default); the weakest edge,
and past ``max_identities`` the weakest workload, make room.

``weight`` is the ``harmonic`` score plugin's weight in the default scheduler profile
(best fit's is 1); ``0`` leaves the plugin out, and the graph is still kept and shown.
``scontrol reconfigure`` takes a new weight. A ``[scheduler.score_weights] harmonic``
entry, where given, wins over it.

The last four drive the feedback loop (``hal.server.malleable``, docs/feedback.md):
resizing ``--malleable`` jobs toward the most goodput, and moving one of two jobs that
clash; durations are written as ``half_life`` is. ``resize_min_gain`` is from 0 to 10.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hal.config.priority import LONGEST_S, fail, unknown_key, whole_number

HARMONIC_KEYS = (
    "half_life",
    "max_peers",
    "max_identities",
    "weight",
    "feedback_tick",
    "resize_interval",
    "resize_min_gain",
    "move_interval",
)
# hal.core.malleable's and hal.server.malleable's defaults (the config plane imports
# neither; tests/unit/core/test_config_feedback_loop.py keeps them equal)
FEEDBACK_TICK_S = 30.0
RESIZE_INTERVAL_S = 600.0
RESIZE_MIN_GAIN = 0.1
MOVE_INTERVAL_S = 1800.0
HALF_LIFE_S = 3600.0
MAX_PEERS = 32
MAX_IDENTITIES = 4096
# hal.scheduler.plugins.HARMONIC_WEIGHT (the config plane does not import the scheduler;
# tests/unit/core/test_config_harmonic.py keeps them equal)
WEIGHT = 2.0
MOST_WEIGHT = 1000.0
# at most: a bigger graph would not be rebuilt for the scheduler every few seconds
# (docs/harmonic.md measures the rebuild)
MOST_PEERS = 1024
MOST_IDENTITIES = 1_000_000
_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86_400),
}
_VALUE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_HINT = 'write seconds or a number and a unit: "90s", "30min", "1h", "2d"'


@dataclass(frozen=True, slots=True)
class HarmonicConfig:
    half_life_s: float = HALF_LIFE_S
    max_peers: int = MAX_PEERS
    max_identities: int = MAX_IDENTITIES
    weight: float = WEIGHT  # the harmonic score plugin's weight; 0: left out of the profile
    # the feedback loop (hal.server.malleable)
    feedback_tick_s: float = FEEDBACK_TICK_S
    resize_interval_s: float = RESIZE_INTERVAL_S
    resize_min_gain: float = RESIZE_MIN_GAIN
    move_interval_s: float = MOVE_INTERVAL_S


def parse_half_life(value: Any, source: str, field: str) -> float:
    """Seconds (a number) or a number and a unit (s, min/m, h, d; plural too)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise fail(source, field, f"{value!r} is not a duration; {_HINT}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _VALUE.fullmatch(value)
        unit = match.group(2).lower() if match else ""
        if match is None or (unit and unit not in _UNITS):
            raise fail(source, field, f"{value!r} is not a duration; {_HINT}")
        seconds = float(match.group(1)) * _UNITS.get(unit, 1)
    if not 1 <= seconds <= LONGEST_S:  # (NaN fails too)
        raise fail(source, field, f"{value!r} must be at least 1 second and finite; {_HINT}")
    return seconds


def parse_weight(value: Any, source: str) -> float:
    """A number from 0 (the plugin off) to ``MOST_WEIGHT``."""
    field = "harmonic.weight"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(source, field, f"{value!r} is not a number; write 2.0, or 0 to turn it off")
    if not 0 <= value <= MOST_WEIGHT:  # (NaN fails too)
        raise fail(
            source,
            field,
            f"must be from 0 (the plugin off) to {MOST_WEIGHT:g} (got {value!r}); "
            "best fit's weight is 1",
        )
    return float(value)


def harmonic_from_table(table: Any, source: str) -> HarmonicConfig:
    if not isinstance(table, dict):
        raise fail(source, "harmonic", 'must be a table: [harmonic] half_life = "1h"')
    for key in table:
        if key not in HARMONIC_KEYS:
            raise fail(source, f"harmonic.{key}", unknown_key(key, HARMONIC_KEYS))
    config = HarmonicConfig()
    half_life = config.half_life_s
    if "half_life" in table:
        half_life = parse_half_life(table["half_life"], source, "harmonic.half_life")
    peers = whole_number(table.get("max_peers", MAX_PEERS), source, "harmonic.max_peers", 1)
    if peers > MOST_PEERS:
        raise fail(source, "harmonic.max_peers", f"must be at most {MOST_PEERS} (got {peers})")
    most = MOST_IDENTITIES
    count = table.get("max_identities", MAX_IDENTITIES)
    identities = whole_number(count, source, "harmonic.max_identities", 2)
    if identities > most:
        raise fail(source, "harmonic.max_identities", f"must be at most {most} (got {count})")
    weight = parse_weight(table["weight"], source) if "weight" in table else WEIGHT
    durations = {}
    for key, default in (
        ("feedback_tick", FEEDBACK_TICK_S),
        ("resize_interval", RESIZE_INTERVAL_S),
        ("move_interval", MOVE_INTERVAL_S),
    ):
        durations[key] = (
            parse_half_life(table[key], source, f"harmonic.{key}") if key in table else default
        )
    gain = table.get("resize_min_gain", RESIZE_MIN_GAIN)
    if isinstance(gain, bool) or not isinstance(gain, int | float) or not 0 <= gain <= 10:
        raise fail(
            source,
            "harmonic.resize_min_gain",
            f"{gain!r} must be a number from 0 to 10: the least share of speedup a resize "
            "must gain, e.g. 0.1",
        )
    return HarmonicConfig(
        half_life_s=half_life,
        max_peers=peers,
        max_identities=identities,
        weight=weight,
        feedback_tick_s=durations["feedback_tick"],
        resize_interval_s=durations["resize_interval"],
        resize_min_gain=float(gain),
        move_interval_s=durations["move_interval"],
    )
