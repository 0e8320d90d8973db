"""Plugin registry and ``Profile``: which plugins run at each extension point.

A profile is built once, at start-up, from a plain mapping (the ``[scheduler]`` table of
the config file, or a test's dict)::

    {
        "plugins": ["priority", "hold", "partition", "noderesources"],  # in call order
        "score_weights": {"noderesources": 1},     # optional, default weight 1
        "plugin_args": {"noderesources": {"score": "best_fit"}},  # optional
    }

Each listed plugin is enabled at every extension point it implements, in list order
(kube-scheduler's "multiPoint"). Anything wrong — an unknown key, plugin or argument, two
QueueSort plugins, a bad weight — raises ``ProfileError`` naming the field, so a bad
config stops the server at start-up instead of mis-scheduling later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hal.core.errors import InvalidRequest, did_you_mean
from hal.scheduler.framework.interfaces import (
    BackfillPlugin,
    CountedResourcePlugin,
    FilterPlugin,
    PermitPlugin,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PostFilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)

PluginArgs = Mapping[str, object]
PluginFactory = Callable[[PluginArgs], Plugin]

_PROFILE_KEYS = frozenset({"name", "plugins", "score_weights", "plugin_args"})


class ProfileError(InvalidRequest):
    """The scheduler profile in the configuration is invalid; ``field`` names where."""

    code = "invalid_profile"


class PluginArgsError(ValueError):
    """Raised by a plugin factory for a bad argument; ``key`` names it (the profile
    prefixes ``plugin_args.<plugin>.``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class Registry:
    """Plugin names to factories. A factory takes the plugin's args mapping."""

    def __init__(self, factories: Mapping[str, PluginFactory] | None = None) -> None:
        self._factories: dict[str, PluginFactory] = dict(factories or {})

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def create(self, name: str, args: PluginArgs) -> Plugin:
        return self._factories[name](args)

    def __contains__(self, name: str) -> bool:
        return name in self._factories


@dataclass(frozen=True, slots=True)
class Profile:
    """The plugins at each extension point, in call order, and the score weights."""

    name: str
    queue_sort: QueueSortPlugin
    pre_filter: tuple[PreFilterPlugin, ...] = ()
    filter: tuple[FilterPlugin, ...] = ()
    post_filter: tuple[PostFilterPlugin, ...] = ()
    pre_score: tuple[PreScorePlugin, ...] = ()
    score: tuple[tuple[ScorePlugin, float], ...] = ()
    reserve: tuple[ReservePlugin, ...] = ()
    permit: tuple[PermitPlugin, ...] = ()
    backfill: BackfillPlugin | None = None
    placement_generate: PlacementGeneratePlugin | None = None
    placement_score: tuple[PlacementScorePlugin, ...] = ()
    counted: tuple[CountedResourcePlugin, ...] = ()

    @classmethod
    def from_plugins(
        cls,
        plugins: Sequence[Plugin],
        *,
        name: str = "custom",
        score_weights: Mapping[str, float] | None = None,
    ) -> Profile:
        """Wire already-built plugin objects (tests, fakes) the same way ``build_profile``
        does. Raises ``ProfileError`` for a missing or duplicate QueueSort, or more than
        one Backfill or PlacementGenerate plugin."""
        weights = score_weights or {}
        sorts = [p for p in plugins if isinstance(p, QueueSortPlugin)]
        if len(sorts) != 1:
            found = ", ".join(p.name for p in sorts) or "none"
            raise ProfileError(
                f"a profile needs exactly one QueueSort plugin (found: {found})",
                field="plugins",
            )
        backfills = [p for p in plugins if isinstance(p, BackfillPlugin)]
        if len(backfills) > 1:
            found = ", ".join(p.name for p in backfills)
            raise ProfileError(
                f"a profile takes at most one Backfill plugin (found: {found})", field="plugins"
            )
        generators = [p for p in plugins if isinstance(p, PlacementGeneratePlugin)]
        if len(generators) > 1:
            found = ", ".join(p.name for p in generators)
            raise ProfileError(
                f"a profile takes at most one PlacementGenerate plugin (found: {found})",
                field="plugins",
            )
        return cls(
            name=name,
            queue_sort=sorts[0],
            pre_filter=tuple(p for p in plugins if isinstance(p, PreFilterPlugin)),
            filter=tuple(p for p in plugins if isinstance(p, FilterPlugin)),
            post_filter=tuple(p for p in plugins if isinstance(p, PostFilterPlugin)),
            pre_score=tuple(p for p in plugins if isinstance(p, PreScorePlugin)),
            score=tuple(
                (p, float(weights.get(p.name, 1))) for p in plugins if isinstance(p, ScorePlugin)
            ),
            reserve=tuple(p for p in plugins if isinstance(p, ReservePlugin)),
            permit=tuple(p for p in plugins if isinstance(p, PermitPlugin)),
            backfill=backfills[0] if backfills else None,
            placement_generate=generators[0] if generators else None,
            placement_score=tuple(p for p in plugins if isinstance(p, PlacementScorePlugin)),
            counted=tuple(p for p in plugins if isinstance(p, CountedResourcePlugin)),
        )


def build_profile(config: Mapping[str, object], registry: Registry) -> Profile:
    """Validate ``config`` and instantiate its plugins. Raises ``ProfileError``."""
    if not isinstance(config, Mapping):
        raise ProfileError("the scheduler profile must be a table", field="scheduler")
    for key in config:
        if key not in _PROFILE_KEYS:
            allowed = ", ".join(sorted(_PROFILE_KEYS))
            hint = did_you_mean(str(key), _PROFILE_KEYS)
            raise ProfileError(
                f"unknown profile key {key!r}{hint}; allowed: {allowed}", field=str(key)
            )
    name = config.get("name", "default")
    if not isinstance(name, str) or not name:
        raise ProfileError("the profile name must be a non-empty string", field="name")

    names = config.get("plugins")
    if not isinstance(names, Sequence) or isinstance(names, str) or not names:
        raise ProfileError("'plugins' must be a non-empty list of plugin names", field="plugins")
    seen: set[str] = set()
    for i, plugin_name in enumerate(names):
        field = f"plugins[{i}]"
        if not isinstance(plugin_name, str):
            raise ProfileError("a plugin name must be a string", field=field)
        if plugin_name not in registry:
            known = ", ".join(registry.names())
            hint = did_you_mean(plugin_name, registry.names())
            raise ProfileError(f"unknown plugin {plugin_name!r}{hint}; known: {known}", field=field)
        if plugin_name in seen:
            raise ProfileError(f"plugin {plugin_name!r} is listed twice", field=field)
        seen.add(plugin_name)

    all_args = config.get("plugin_args", {})
    if not isinstance(all_args, Mapping):
        raise ProfileError("'plugin_args' must be a table", field="plugin_args")
    for plugin_name in all_args:
        if plugin_name not in seen:
            raise ProfileError(
                f"arguments given for {plugin_name!r}, which is not in 'plugins'",
                field=f"plugin_args.{plugin_name}",
            )

    plugins: list[Plugin] = []
    for plugin_name in names:
        args = all_args.get(plugin_name, {})
        if not isinstance(args, Mapping):
            raise ProfileError(
                "plugin arguments must be a table", field=f"plugin_args.{plugin_name}"
            )
        try:
            plugins.append(registry.create(plugin_name, args))
        except PluginArgsError as err:
            raise ProfileError(
                f"{plugin_name}: {err}", field=f"plugin_args.{plugin_name}.{err.key}"
            ) from err

    weights = config.get("score_weights", {})
    if not isinstance(weights, Mapping):
        raise ProfileError("'score_weights' must be a table", field="score_weights")
    scorers = {p.name for p in plugins if isinstance(p, ScorePlugin)}
    clean: dict[str, float] = {}
    for plugin_name, weight in weights.items():
        field = f"score_weights.{plugin_name}"
        if plugin_name not in scorers:
            raise ProfileError(f"{plugin_name!r} is not an enabled Score plugin", field=field)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            raise ProfileError("a score weight must be a positive number", field=field)
        clean[plugin_name] = float(weight)
    return Profile.from_plugins(plugins, name=name, score_weights=clean)


def reject_unknown_args(args: PluginArgs, allowed: Sequence[str]) -> None:
    """For plugin factories: raise ``PluginArgsError`` for any key not in ``allowed``."""
    for key in args:
        if key not in allowed:
            raise PluginArgsError(
                str(key),
                f"unknown argument {key!r}{did_you_mean(str(key), allowed)}; "
                f"allowed: {', '.join(allowed) or 'none'}",
            )
