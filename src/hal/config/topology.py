"""The ``[topology]`` table of ``hal.toml`` → ``hal.core.topology.Topology``.

Either point at a Slurm ``topology.conf`` or write the switches in TOML (not both)::

    [topology]
    level_names = ["leaf", "spine"]        # optional, bottom-up
    file = "/etc/hal/topology.conf"        # Slurm syntax; relative to the config file

    # or, in TOML:
    [[topology.switches]]
    name = "leaf0"
    nodes = "n[000-015]"                   # a host list
    [[topology.switches]]
    name = "spine0"
    switches = "leaf[0-3]"
    link_speed = 100                       # optional (Slurm's LinkSpeed, default 1)

    [[topology.blocks]]                    # optional (topology/block): used when no switches
    name = "b0"
    nodes = "n[000-031]"
    # block_sizes = [16, 32]

    [[topology.labels]]                    # rack/zone/region/site of the nodes a host
    nodes = "n[000-015]"                   # list names; without switches or blocks
    rack = "r1"                            # they form the placement tree
    zone = "z1"                            # (core/topology_labels.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hal.core.errors import InvalidRequest, did_you_mean
from hal.core.topology import (
    Block,
    LabelRule,
    Switch,
    Topology,
    TopologyError,
)
from hal.core.topology_labels import LABEL_LEVELS, check_labels
from hal.slurm.syntax import expand_hostlist
from hal.slurm.topology_conf import link_speed, parse_topology_conf

_KEYS = frozenset({"file", "switches", "blocks", "block_sizes", "level_names", "labels"})
_SWITCH_KEYS = frozenset({"name", "nodes", "switches", "link_speed"})
_BLOCK_KEYS = frozenset({"name", "nodes"})


def _unknown(where: str, unknown: list[str], known: frozenset[str]) -> str:
    return (
        f"{where}: unknown key(s) {unknown}{did_you_mean(unknown[0], known)}; "
        f"known keys are {sorted(known)}"
    )


def topology_from_table(raw: Any, *, base_dir: Path | None = None) -> Topology:
    """Validate the ``[topology]`` table. Raises ``TopologyError`` naming the field."""
    if not isinstance(raw, dict):
        raise TopologyError("[topology] must be a table", field="topology")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise TopologyError(
            f"[topology]: unknown key(s) {unknown}{did_you_mean(unknown[0], _KEYS)}; "
            f"known keys are {sorted(_KEYS)}",
            field=f"topology.{unknown[0]}",
        )
    names = raw.get("level_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TopologyError(
            "topology.level_names must be a list of names", field="topology.level_names"
        )
    level_names = tuple(names)
    rules = tuple(_label_rule(item, i) for i, item in enumerate(_list(raw, "labels")))
    if "file" in raw:
        if "switches" in raw or "blocks" in raw or "block_sizes" in raw:
            raise TopologyError(
                "[topology]: give either file or switches/blocks, not both", field="topology.file"
            )
        if not isinstance(raw["file"], str) or not raw["file"]:
            raise TopologyError(
                'topology.file must be the path of a topology.conf, e.g. "topology.conf"',
                field="topology.file",
            )
        path = Path(raw["file"])
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise TopologyError(
                f"cannot read topology file {path}: {err.strerror}", field="topology.file"
            ) from err
        except UnicodeDecodeError as err:
            raise TopologyError(
                f"topology file {path} is not UTF-8 text (byte {err.start}); save it as UTF-8",
                field="topology.file",
            ) from err
        conf = parse_topology_conf(text, level_names=level_names)
        return Topology(conf.switches, conf.blocks, conf.block_sizes, level_names, rules)
    switches = tuple(_switch(item, i) for i, item in enumerate(_list(raw, "switches")))
    blocks = tuple(_block(item, i) for i, item in enumerate(_list(raw, "blocks")))
    sizes = raw.get("block_sizes", [])
    if not isinstance(sizes, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in sizes
    ):
        raise TopologyError(
            "topology.block_sizes must be a list of integers", field="topology.block_sizes"
        )
    if not switches and not blocks and not rules:
        raise TopologyError(
            "[topology] needs switches, blocks, labels or a file", field="topology.switches"
        )
    return Topology(switches, blocks, tuple(sizes), level_names, rules)


def _label_rule(item: Any, i: int) -> LabelRule:
    where = f"topology.labels[{i}]"
    if not isinstance(item, dict) or "nodes" not in item:
        raise TopologyError(f"{where} needs nodes (a host list)", field=where)
    unknown = sorted(set(item) - {"nodes", *LABEL_LEVELS})
    if unknown:
        raise TopologyError(
            f"{where}: unknown key(s) {unknown}{did_you_mean(unknown[0], LABEL_LEVELS)}; "
            f"labels are {', '.join(LABEL_LEVELS)}",
            field=where,
        )
    labels = {k: v for k, v in item.items() if k != "nodes"}
    if not labels or not all(isinstance(v, str) for v in labels.values()):
        raise TopologyError(f"{where} needs at least one label with a text value", field=where)
    try:
        check_labels(labels, field=where)
    except InvalidRequest as err:
        raise TopologyError(f"{where}: {err.message}", field=where) from err
    return LabelRule(_hosts(item, "nodes", where), tuple(sorted(labels.items())))


def _list(raw: dict[str, Any], key: str) -> list[Any]:
    items = raw.get(key, [])
    if not isinstance(items, list):
        raise TopologyError(f"topology.{key} must be a list of tables", field=f"topology.{key}")
    return items


def _hosts(item: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = item.get(key)
    if value is None:
        return ()
    try:
        if isinstance(value, str):
            return tuple(expand_hostlist(value, field=where))
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(name for v in value for name in expand_hostlist(v, field=where))
    except InvalidRequest as err:
        raise TopologyError(f"{where}: {err.message}", field=where) from err
    raise TopologyError(f"{where}.{key} must be a host list or a list of names", field=where)


def _switch(item: Any, i: int) -> Switch:
    where = f"topology.switches[{i}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise TopologyError(f"{where} needs a name", field=where)
    unknown = sorted(set(item) - _SWITCH_KEYS)
    if unknown:
        raise TopologyError(_unknown(where, unknown, _SWITCH_KEYS), field=where)
    return Switch(
        item["name"],
        _hosts(item, "nodes", where),
        _hosts(item, "switches", where),
        link_speed(item.get("link_speed", 1), f"{where}.link_speed"),
    )


def _block(item: Any, i: int) -> Block:
    where = f"topology.blocks[{i}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise TopologyError(f"{where} needs a name", field=where)
    unknown = sorted(set(item) - _BLOCK_KEYS)
    if unknown:
        raise TopologyError(_unknown(where, unknown, _BLOCK_KEYS), field=where)
    return Block(item["name"], _hosts(item, "nodes", where))
