"""The scheduler profile the server builds from ``hal.toml``.

Without a ``[scheduler]`` profile the server runs ``default_profile`` shaped by the
config: ``limits`` when some account or QoS limit is set, ``preemption`` with
``[preemption]`` or cohorts, ``datalocality`` with ``[data]``, ``licenses`` with
``[licenses]``, the topology's level names, ``harmonic`` at ``[harmonic] weight`` (0: left
out).

A ``[scheduler]`` table without ``plugins`` tunes that default profile: its
``plugin_args`` (per plugin, key by key) and ``score_weights`` are laid over the default
ones, so ``[scheduler.plugin_args.backfill] mode = "conservative"`` changes backfill and
nothing else. A table with ``plugins`` replaces the list, and must then keep the plugins
that enforce what the config asks for: the server refuses to start rather than leave
configured limits or preemption silently unenforced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hal.config.model import HalConfig
from hal.core.errors import InvalidRequest
from hal.scheduler.framework import ProfileError
from hal.scheduler.plugins import LICENSES, LIMITS, PREEMPTION, default_profile

_MERGED = ("plugin_args", "score_weights")


def config_default_profile(config: HalConfig) -> dict[str, object]:
    """The default profile for ``config``: the plugins its settings need."""
    data = config.data
    # [data] settings left out take the plugin's defaults (DATA_WEIGHT, LOCALITY_WAIT_S)
    data_args: dict[str, Any] = {}
    if data is not None:
        data_args["data"] = True
        if data.weight is not None:
            data_args["data_weight"] = data.weight
        if data.locality_wait_seconds is not None:
            data_args["locality_wait_s"] = data.locality_wait_seconds
    return default_profile(
        topology=config.topology,
        limits=config.priority.has_limits,
        preemption=needs_preemption(config),
        licenses=bool(config.licenses),
        harmonic_weight=config.harmonic.weight,
        **data_args,
    )


def needs_preemption(config: HalConfig) -> bool:
    """``[preemption]`` is on, or cohorts lend quota that must be reclaimable."""
    return config.preemption.enabled or config.priority.has_cohorts


def server_profile(config: HalConfig) -> dict[str, object]:
    """The profile the server schedules with (see the module doc). Raises
    ``ProfileError`` naming ``scheduler.plugins`` when a custom list leaves out a plugin
    the config needs."""
    custom = config.scheduler_profile
    default = config_default_profile(config)
    if not custom:
        return default
    if "plugins" not in custom:
        return overlay(default, custom)
    plugins = custom["plugins"]
    if isinstance(plugins, list):  # anything else: build_profile names the error
        require_enforcers(plugins, config)
    return custom


def overlay(default: Mapping[str, object], custom: Mapping[str, object]) -> dict[str, object]:
    """``default`` with ``custom``'s keys over it; ``plugin_args`` merge per plugin and
    ``score_weights`` per name. Keys ``build_profile`` does not know pass through for it
    to refuse, naming them."""
    merged = dict(default)
    for key, value in custom.items():
        base = default.get(key)
        if key in _MERGED and isinstance(base, Mapping) and isinstance(value, Mapping):
            merged[key] = _merge_tables(base, value)
        else:
            merged[key] = value
    return merged


def _merge_tables(base: Mapping[str, object], over: Mapping[str, object]) -> dict[str, object]:
    """``over``'s entries over ``base``'s; two tables (one plugin's args) merge key by key."""
    out = dict(base)
    for name, value in over.items():
        old = out.get(name)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[name] = {**old, **value}
        else:
            out[name] = value
    return out


def require_enforcers(plugins: list[object], config: HalConfig) -> None:
    """Refuse a ``[scheduler] plugins`` list that drops the plugin enforcing configured
    limits or preemption."""
    missing = []
    if config.priority.has_limits and LIMITS not in plugins:
        missing.append((LIMITS, "[[accounts]]/[[qos]] set limits"))
    if needs_preemption(config) and PREEMPTION not in plugins:
        missing.append((PREEMPTION, "[preemption] is on or [[accounts]] set a cohort"))
    if config.licenses and LICENSES not in plugins:
        missing.append((LICENSES, "[licenses] names licenses"))
    if missing:
        what = "; ".join(f"{why} but it leaves out {name!r}" for name, why in missing)
        raise ProfileError(
            f"{what}. Add the plugin to the list, or drop 'plugins' "
            "and give only plugin_args/score_weights to tune the default profile",
            field="scheduler.plugins",
        )


def config_error(err: ProfileError, source: str) -> InvalidRequest:
    """A profile ``build_profile`` refused, as a mistake in the configuration file
    ``source`` (``FILE: scheduler.FIELD: ...``), like every other one: `hal server`
    prints it at start, ``scontrol reconfigure`` when it re-reads the file."""
    field = err.field or "scheduler"
    field = field if field.startswith("scheduler") else f"scheduler.{field}"
    return InvalidRequest(f"{source}: {field}: {err.message}", field=field)
