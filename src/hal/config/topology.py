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

    [[topology.blocks]]                    # optional (topology/block): used when no switches
    name = "b0"
    nodes = "n[000-031]"
    # block_sizes = [16, 32]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hal.core.errors import InvalidRequest
from hal.core.slurm_syntax import expand_hostlist
from hal.core.topology import Block, Switch, Topology, TopologyError, parse_topology_conf

_KEYS = frozenset({"file", "switches", "blocks", "block_sizes", "level_names"})


def topology_from_table(raw: Any, *, base_dir: Path | None = None) -> Topology:
    """Validate the ``[topology]`` table. Raises ``TopologyError`` naming the field."""
    if not isinstance(raw, dict):
        raise TopologyError("[topology] must be a table", field="topology")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise TopologyError(
            f"[topology]: unknown key(s) {unknown}; known keys are {sorted(_KEYS)}",
            field=f"topology.{unknown[0]}",
        )
    names = raw.get("level_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TopologyError(
            "topology.level_names must be a list of names", field="topology.level_names"
        )
    level_names = tuple(names)
    if "file" in raw:
        if "switches" in raw or "blocks" in raw or "block_sizes" in raw:
            raise TopologyError(
                "[topology]: give either file or switches/blocks, not both", field="topology.file"
            )
        path = Path(str(raw["file"]))
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            text = path.read_text()
        except OSError as err:
            raise TopologyError(
                f"cannot read topology file {path}: {err.strerror}", field="topology.file"
            ) from err
        return parse_topology_conf(text, level_names=level_names)
    switches = tuple(_switch(item, i) for i, item in enumerate(_list(raw, "switches")))
    blocks = tuple(_block(item, i) for i, item in enumerate(_list(raw, "blocks")))
    sizes = raw.get("block_sizes", [])
    if not isinstance(sizes, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in sizes
    ):
        raise TopologyError(
            "topology.block_sizes must be a list of integers", field="topology.block_sizes"
        )
    if not switches and not blocks:
        raise TopologyError(
            "[topology] needs switches, blocks or a file", field="topology.switches"
        )
    return Topology(switches, blocks, tuple(sizes), level_names)


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
    unknown = sorted(set(item) - {"name", "nodes", "switches"})
    if unknown:
        raise TopologyError(f"{where}: unknown key(s) {unknown}", field=where)
    return Switch(item["name"], _hosts(item, "nodes", where), _hosts(item, "switches", where))


def _block(item: Any, i: int) -> Block:
    where = f"topology.blocks[{i}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise TopologyError(f"{where} needs a name", field=where)
    unknown = sorted(set(item) - {"name", "nodes"})
    if unknown:
        raise TopologyError(f"{where}: unknown key(s) {unknown}", field=where)
    return Block(item["name"], _hosts(item, "nodes", where))
