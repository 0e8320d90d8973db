"""The ``sinfo`` command.

Partition-oriented by default: one line per partition and group of nodes that print alike
(same state, same CPUs...), node names compressed to hostlists (``adev[8-15]``). ``-N``
prints one line per node and partition. The default partition is marked ``debug*``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hal.compat.formats import Field, duration_short, parse_format, render_rows
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError
from hal.core.node import gpu_type_name
from hal.core.slurm_syntax import compress_hostlist, expand_hostlist
from hal.wire.nodes import NodeInfo, PartitionInfo

DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SUMMARIZE_FORMAT = "%#P %.5a %.10l %.16F  %N"
LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODE_FORMAT = "%#N %.6D %#P %6t"
NODE_LONG_FORMAT = "%#N %.6D %#P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"

LONG_STATES = {
    "idle": "idle",
    "alloc": "allocated",
    "mix": "mixed",
    "drain": "drained",
    "drng": "draining",
    "down": "down",
    "comp": "completing",
    "resv": "reserved",
    "maint": "maintenance",
    "fail": "fail",
}
_ALLOCATED = {"alloc", "mix", "comp"}
# sinfo -t: Slurm's node state names (short and long, any case) → the display states they
# match. ``drain`` is both drained and draining nodes, as Slurm's DRAIN flag; names of
# states HAL never shows are accepted and match nothing, as on a cluster without such nodes.
STATE_FILTERS: dict[str, frozenset[str]] = {
    **{short: frozenset({short}) for short in LONG_STATES},
    **{long: frozenset({short}) for short, long in LONG_STATES.items()},
    "drain": frozenset({"drain", "drng"}),
    **{
        name: frozenset()
        for name in (
            "boot", "booting", "cloud", "failing", "future", "futr", "inval", "invalid",
            "no_respond", "npc", "perfctrs", "planned", "power_down", "powered_down",
            "powering_down", "powering_up", "pow_dn", "pow_up", "reboot", "reboot_issued",
            "reboot_requested", "unk", "unknown", "blocked",
        )
    },
}  # fmt: skip

OPTIONS = (
    Opt("noheader", ("noheader",), "h", Arg.NONE),
    Opt("summarize", ("summarize",), "s", Arg.NONE),
    Opt("node", ("Node",), "N", Arg.NONE),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("format", ("format",), "o"),
    Opt("partition", ("partition",), "p"),
    Opt("nodes", ("nodes",), "n"),
    Opt("states", ("states",), "t"),
    Opt("all", ("all",), "a", Arg.NONE),  # hidden partitions: HAL has none
    Opt("exact", ("exact",), "e", Arg.NONE),  # HAL already groups only identical nodes
    Opt("clusters", ("clusters",), "M"),
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)

Row = tuple[PartitionInfo | None, NodeInfo | None]
NodeColumn = Callable[[PartitionInfo | None, NodeInfo | None], str]


def _partition_name(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None:
        return "n/a"
    return p.name + ("*" if p.default else "")


def _limit(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None:
        return "n/a"
    return "infinite" if p.max_time_seconds <= 0 else duration_short(p.max_time_seconds)


def _gres(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if n is None or not n.gpus:
        return "(null)"
    return f"gpu:{gpu_type_name(n.gpu_model)}:{n.gpus}" if n.gpu_model else f"gpu:{n.gpus}"


def _job_size(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None:
        return "n/a"
    return f"1-{p.max_nodes}" if p.max_nodes else "1-infinite"


def _node(get: Callable[[NodeInfo], str]) -> NodeColumn:
    return lambda p, n: get(n) if n is not None else "n/a"


# Per-node columns; the aggregate ones (D, N, F, C) are computed over a group of nodes.
NODE_LETTERS: dict[str, tuple[str, NodeColumn]] = {
    "P": ("PARTITION", _partition_name),
    "R": ("PARTITION", lambda p, n: p.name if p else "n/a"),
    "a": ("AVAIL", lambda p, n: ("up" if p.up else "down") if p else "n/a"),
    "l": ("TIMELIMIT", _limit),
    "s": ("JOB_SIZE", _job_size),
    "r": ("ROOT", lambda p, n: "no"),
    "h": ("OVERSUBS", lambda p, n: "NO"),
    "g": ("GROUPS", lambda p, n: "all"),
    "t": ("STATE", _node(lambda n: n.display_state)),
    "T": ("STATE", _node(lambda n: LONG_STATES.get(n.display_state, n.display_state))),
    "c": ("CPUS", _node(lambda n: str(n.cpus))),
    "m": ("MEMORY", _node(lambda n: str(n.memory_bytes // (1024 * 1024)))),
    "G": ("GRES", _gres),
    "f": ("AVAIL_FEATURES", _node(lambda n: ",".join(n.features) or "(null)")),
    "E": ("REASON", _node(lambda n: n.reason or "none")),
    # A node configured with CPUs only reports that many sockets of one core (slurm.conf).
    "z": ("S:C:T", _node(lambda n: f"{n.cpus}:1:1")),
    "d": ("TMP_DISK", lambda p, n: "0"),
    "w": ("WEIGHT", lambda p, n: "1"),
}
AGGREGATE_TITLES = {"D": "NODES", "N": "NODELIST", "F": "NODES(A/I/O/T)", "C": "CPUS(A/I/O/T)"}


def sinfo(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sinfo"))
    opts = {dest: value for dest, value, _ in parsed.values}
    if {"help", "usage", "version"} & opts.keys():
        console.out("Usage: sinfo [-h] [-s] [-N] [-l] [-o format] [-p partition] [-n nodes]")
        return 0
    if parsed.positionals:
        return console.error(f"Unrecognized option: {parsed.positionals[0]}")
    node_mode = "node" in opts
    if "format" in opts:
        fmt = opts["format"] or ""
    elif "summarize" in opts:
        fmt = SUMMARIZE_FORMAT
    elif node_mode:
        fmt = NODE_LONG_FORMAT if "long" in opts else NODE_FORMAT
    else:
        fmt = LONG_FORMAT if "long" in opts else DEFAULT_FORMAT
    if not fmt.strip():
        return console.error(
            "Format option lacks specification: -o needs fields, e.g. -o '%P %t %N'"
        )
    layout = parse_format(fmt)
    for part in layout:
        if isinstance(part, Field) and part.letter not in NODE_LETTERS | AGGREGATE_TITLES:
            return console.error(f"Invalid node format specification: {part.letter}")
    try:
        partitions = console.client.partitions()
        nodes = console.client.nodes()
        wanted_nodes = (
            set(expand_hostlist(opts["nodes"] or "", field="nodes")) if "nodes" in opts else None
        )
    except HalError as err:
        return console.error(err.message)
    wanted_parts = set((opts.get("partition") or "").split(",")) if "partition" in opts else None
    try:
        wanted_states = parse_node_states(opts["states"] or "") if "states" in opts else None
    except ValueError as err:
        return console.error(str(err))
    partitions = [p for p in partitions if wanted_parts is None or p.name in wanted_parts]
    nodes = [
        n
        for n in nodes
        if (wanted_nodes is None or n.name in wanted_nodes)
        and (wanted_states is None or any(n.display_state in c for c in wanted_states))
    ]
    groups = _groups(
        layout,
        partitions,
        nodes,
        node_mode=node_mode,
        filtered=wanted_nodes is not None or wanted_states is not None,
    )
    if "long" in opts and "noheader" not in opts:
        console.out(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(console.clock())))
    for line in sinfo_lines(layout, groups, header="noheader" not in opts):
        console.out(line)
    return 0


def parse_node_states(text: str) -> list[frozenset[str]] | None:
    """``-t``: state names, comma-separated, any case → for each, the display states it
    matches (a node is shown if any entry matches it; ``a&b`` needs both). ``all`` is no
    filter (None). A name Slurm does not have is a ``ValueError``, not a silent empty
    list."""
    choices: list[frozenset[str]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item.lower() == "all":
            return None
        match: frozenset[str] | None = None
        for name in item.lower().split("&"):
            states = STATE_FILTERS.get(name.strip())
            if states is None:
                raise ValueError(
                    f"Invalid node state specified: {name.strip()}; use idle, alloc, mix, "
                    "drain, drng, down, comp, resv, maint, fail (or their long names), "
                    "comma-separated, or all"
                )
            match = states if match is None else match & states
        choices.append(match or frozenset())
    return choices


def _members(partition: PartitionInfo, nodes: list[NodeInfo]) -> list[NodeInfo]:
    """The nodes the server lists in ``partition`` (none listed: none, not all of them)."""
    names = set(partition.nodes)
    return [n for n in nodes if n.name in names]


def _groups(
    layout: list[Field | str],
    partitions: list[PartitionInfo],
    nodes: list[NodeInfo],
    *,
    node_mode: bool,
    filtered: bool,
) -> list[tuple[PartitionInfo | None, list[NodeInfo]]]:
    """Groups of nodes that print on one line, in partition order then node order."""
    per_node = [p.letter for p in layout if isinstance(p, Field) and p.letter in NODE_LETTERS]
    by_name = sorted(nodes, key=lambda n: n.name)
    groups: list[tuple[PartitionInfo | None, list[NodeInfo]]] = []
    if node_mode:
        for node in by_name:
            for partition in [p for p in partitions if node in _members(p, by_name)]:
                groups.append((partition, [node]))
        return groups
    for partition in partitions:
        members = _members(partition, by_name)
        if not members:
            if not filtered:  # an empty partition still shows, with zero nodes
                groups.append((partition, []))
            continue
        keyed: dict[tuple[str, ...], list[NodeInfo]] = {}
        for node in members:
            key = tuple(NODE_LETTERS[letter][1](partition, node) for letter in per_node)
            keyed.setdefault(key, []).append(node)
        groups += [(partition, group) for group in keyed.values()]
    return groups


def _counts(nodes: list[NodeInfo]) -> tuple[str, str]:
    alloc = sum(n.display_state in _ALLOCATED for n in nodes)
    idle = sum(n.display_state == "idle" for n in nodes)
    other = len(nodes) - alloc - idle
    cpu_alloc = sum(n.cpus_alloc for n in nodes if n.display_state in _ALLOCATED)
    usable = [n for n in nodes if n.display_state in _ALLOCATED or n.display_state == "idle"]
    cpu_idle = sum(n.cpus - n.cpus_alloc for n in usable)
    cpu_total = sum(n.cpus for n in nodes)
    cpu_other = cpu_total - cpu_alloc - cpu_idle
    return (
        f"{alloc}/{idle}/{other}/{len(nodes)}",
        f"{cpu_alloc}/{cpu_idle}/{cpu_other}/{cpu_total}",
    )


def sinfo_lines(
    layout: list[Field | str],
    groups: list[tuple[PartitionInfo | None, list[NodeInfo]]],
    *,
    header: bool,
) -> list[str]:
    letters = {p.letter for p in layout if isinstance(p, Field)}
    titles = {letter: AGGREGATE_TITLES.get(letter) or NODE_LETTERS[letter][0] for letter in letters}
    rows = []
    for partition, members in groups:
        first = members[0] if members else None
        row = {
            letter: NODE_LETTERS[letter][1](partition, first)
            for letter in letters
            if letter in NODE_LETTERS
        }
        nodes_aiot, cpus_aiot = _counts(members)
        row.update(
            D=str(len(members)),
            N=compress_hostlist([n.name for n in members]),
            F=nodes_aiot,
            C=cpus_aiot,
        )
        rows.append(row)
    return render_rows(layout, titles, rows, header=header)
