"""Each built-in plugin declares, in the module that defines it, every extension point a
profile wires it at (``_FILTER: type[FilterPlugin] = NodeResourcesFit``), so mypy checks
its methods against each point's Protocol where the plugin is written. A profile finds
points by method names at run time (``Profile.from_plugins``): a plugin wired at a point
it does not declare was never checked against it, and fails here."""

from __future__ import annotations

import inspect
import sys

import pytest

from hal.core.preemption import PreemptionPolicy, PreemptType
from hal.core.priority import PriorityPolicy
from hal.scheduler.framework import interfaces
from hal.scheduler.framework.interfaces import Plugin
from hal.scheduler.plugins import default_registry
from hal.scheduler.plugins.hold.hold import HoldAndBegin

REGISTRY = default_registry(
    policy=PriorityPolicy(),
    preemption_policy=PreemptionPolicy(type=PreemptType.QOS),
    licenses={"matlab": 1},
)
# every extension point: the Protocols of ``interfaces`` a plugin may serve, and the
# optional ``PreFilterWaiver`` beside PreFilter (the runtime finds it as it finds points)
POINTS = {
    name: proto
    for name, proto in vars(interfaces).items()
    if inspect.isclass(proto)
    and (name.endswith("Plugin") or name == "PreFilterWaiver")
    and name != "Plugin"
}


def wired(plugin: Plugin) -> set[str]:
    """The points ``Profile.from_plugins`` wires ``plugin`` at (it asks ``isinstance``)."""
    return {name for name, proto in POINTS.items() if isinstance(plugin, proto)}


def declared(cls: type) -> set[str]:
    """The points the module defining ``cls`` declares it serves (``X: type[P] = cls``);
    other Protocols it declares (``WeightedScorer``: a way of serving Score) are not
    points."""
    module = sys.modules[cls.__module__]
    found = set()
    for var, annotation in module.__annotations__.items():
        text = str(annotation)
        if text.startswith("type[") and getattr(module, var, None) is cls:
            point = text.removeprefix("type[").removesuffix("]")
            if point in POINTS:
                found.add(point)
    return found


@pytest.mark.parametrize("name", REGISTRY.names())
def test_each_plugin_declares_every_point_it_is_wired_at(name: str) -> None:
    plugin = REGISTRY.create(name, {})
    points = wired(plugin)
    assert points, f"{name} serves no extension point"
    assert declared(type(plugin)) == points


def test_a_point_added_without_its_declaration_is_found() -> None:
    """The check itself: a subclass of ``hold`` given a Score method is wired at Score
    too, which its declarations (``hold``'s PreFilter) do not say."""

    class Scoring(HoldAndBegin):
        def score(self, *args: object) -> object:
            return None

    assert wired(Scoring()) == {"PreFilterPlugin", "PreFilterWaiver", "ScorePlugin"}
    assert declared(HoldAndBegin) == {"PreFilterPlugin", "PreFilterWaiver"}
    assert declared(Scoring) != wired(Scoring())
