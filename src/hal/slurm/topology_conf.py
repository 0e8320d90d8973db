"""Slurm's ``topology.conf``, read into and written from a ``hal.core.topology.Topology``
(``[topology] file = ...`` in hal.toml, ``scontrol show topology``)."""

from __future__ import annotations

from hal.core.errors import InvalidRequest
from hal.core.topology import Block, Switch, Topology, TopologyError
from hal.slurm.syntax import compress_hostlist, expand_hostlist


def parse_topology_conf(text: str, *, level_names: tuple[str, ...] = ()) -> Topology:
    """Parse Slurm's ``topology.conf`` (``SwitchName=.. Nodes=..|Switches=..``,
    ``BlockName=.. Nodes=..``, ``BlockSizes=..``; ``#`` comments; keys in any case;
    host lists like ``tux[0-15]``)."""
    switches: list[Switch] = []
    blocks: list[Block] = []
    sizes: tuple[int, ...] = ()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"topology.conf line {lineno}"
        pairs: dict[str, str] = {}
        for word in line.split():
            key, eq, value = word.partition("=")
            if not eq or not value:
                raise TopologyError(f"{where}: expected Key=Value, got {word!r}", field=where)
            pairs[key.lower()] = value
        if "switchname" in pairs:
            _no_unknown(pairs, {"switchname", "nodes", "switches", "linkspeed"}, where)
            switches.append(
                Switch(
                    pairs["switchname"],
                    nodes=_hosts(pairs.get("nodes"), where),
                    switches=_hosts(pairs.get("switches"), where),
                    link_speed=link_speed(pairs.get("linkspeed", "1"), where),
                )
            )
        elif "blockname" in pairs:
            _no_unknown(pairs, {"blockname", "nodes"}, where)
            blocks.append(Block(pairs["blockname"], _hosts(pairs.get("nodes"), where)))
        elif "blocksizes" in pairs:
            _no_unknown(pairs, {"blocksizes"}, where)
            try:
                sizes = tuple(int(v) for v in pairs["blocksizes"].split(","))
            except ValueError:
                raise TopologyError(
                    f"{where}: BlockSizes takes integers, e.g. BlockSizes=16,32", field=where
                ) from None
        else:
            raise TopologyError(
                f"{where}: expected SwitchName=, BlockName= or BlockSizes=", field=where
            )
    return Topology(tuple(switches), tuple(blocks), sizes, level_names)


def link_speed(value: object, where: str) -> int:
    """A switch's ``LinkSpeed``: a whole number >= 1."""
    try:
        speed = int(str(value)) if not isinstance(value, bool) else 0
    except ValueError:
        speed = 0
    if speed < 1:
        raise TopologyError(
            f"{where}: LinkSpeed takes a whole number >= 1, e.g. LinkSpeed=100, not {value!r}",
            field=where,
        )
    return speed


def _no_unknown(pairs: dict[str, str], known: set[str] | frozenset[str], where: str) -> None:
    unknown = sorted(set(pairs) - known)
    if unknown:
        raise TopologyError(f"{where}: unknown key(s) {', '.join(unknown)}", field=where)


def _hosts(text: str | None, where: str) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        return tuple(expand_hostlist(text, field="topology"))
    except InvalidRequest as err:
        raise TopologyError(f"{where}: {err.message}", field=where) from err


def format_topology_conf(topo: Topology) -> str:
    """The tree (and blocks) back in topology.conf syntax."""
    lines = []
    for s in topo.switches:
        kind = "Nodes" if s.nodes or not s.switches else "Switches"
        members = s.nodes if kind == "Nodes" else s.switches
        speed = f" LinkSpeed={s.link_speed}" if s.link_speed != 1 else ""
        lines.append(f"SwitchName={s.name} {kind}={compress_hostlist(list(members))}{speed}")
    for b in topo.blocks:
        lines.append(f"BlockName={b.name} Nodes={compress_hostlist(list(b.nodes))}")
    if topo.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in topo.block_sizes))
    return "\n".join(lines) + "\n"
