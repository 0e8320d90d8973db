"""The ``sinfo`` command.

Partition-oriented by default: one line per partition and group of nodes that print alike
(same state, same CPUs...), node names compressed to hostlists (``adev[8-15]``). ``-N``
prints one line per node and partition. The default partition is marked ``debug*``.

States carry Slurm's suffixes (``idle*``: the agent missed heartbeats; ``node_states``).
``-O NodeList,StateLong:10,FreeMem`` takes Slurm's field names (``LONG_FIELDS``) with
squeue's ``:[.]size[suffix]``. ``%e``/``FreeMem`` and ``%O``/``CPUsLoad`` are what the
agents measured with their latest heartbeat, ``N/A`` while unknown and ``min-max`` over a
group of nodes unless ``-e``. A format without a partition column (``-o "%N %t"``) groups
nodes across partitions, each node once, as Slurm does.

Rows go as Slurm's default sort ``#P,-t``: partitions in their order, in each the highest
node state first (``slurm_state_number``: drained before allocated, idle, down); ``-N``
by node, then partition name. ``-R`` (``--list-reasons``) lists the nodes down, drained,
draining or failing (unless ``-t`` names other states) with why, who said so and when
(``%E %u %H``), each node once. ``-r``/``-d`` keep the nodes that answer / do not.
``-o %all`` (``-O All``) prints every letter in Slurm's order. ``-T`` lists the
reservations instead (``sinfo_reservations``). Checked against Slurm
22.05.8 (docs/slurm-checks.md "sinfo -R", "sinfo's row order", "sinfo's letters").
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hal.compat.formats import (
    Field,
    duration_short,
    parse_format,
    parse_long_names,
    render_rows,
    timestamp,
)
from hal.compat.job_fields import user_field
from hal.compat.node_gres import NO_GRES, gres, gres_used
from hal.compat.node_states import (
    NOT_RESPONDING,
    parse_node_states,
    scontrol_state,
    state_compact,
    state_long,
    state_matches,
)
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.compat.sinfo_reservations import reservation_lines
from hal.compat.sinfo_sort import DEFAULT_SORT, NODE_SORT, sort_rows
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError
from hal.slurm.syntax import compress_hostlist, expand_hostlist

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.nodes import NodeInfo, PartitionInfo

    NodeColumn = Callable[[PartitionInfo | None, NodeInfo | None], str]

DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SUMMARIZE_FORMAT = "%#P %.5a %.10l %.16F %N"
LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
# -N: the partition right-aligned, CPUS left-aligned (as Slurm 22.05.8 prints them)
NODE_FORMAT = "%#N %.6D %.#P %6t"
NODE_LONG_FORMAT = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
REASONS_FORMAT = "%20E %9u %19H %N"
REASONS_LONG_FORMAT = "%20E %12U %19H %6t %N"
REASON_STATES = "down,drain,fail"  # what -R lists without -t
# -o %all and -O All: every letter, as Slurm 22.05.8 prints them (the capitals with a
# space before the bar, the last one's trailing)
ALL_FORMAT = (
    "%a|%b|%c|%d|%e|%f|%g|%h|%l|%m|%n|%o|%p|%r|%s|%t|%u|%v|%w|%z|"
    + " |".join(f"%{letter}" for letter in "ABCDEFGHILMNOPRSTUVXYZ")
    + " "
)

# the base states sinfo's A/I/O/T counts as allocated (a draining node's jobs still hold
# its CPUs: Slurm 22.05.8 counts it allocated, its free CPUs other) and as usable
_ALLOCATED = {"alloc", "mix", "comp", "drng"}
_USABLE = {"alloc", "mix", "comp", "idle"}

OPTIONS = (
    Opt("noheader", ("noheader",), "h", Arg.NONE),
    Opt("summarize", ("summarize",), "s", Arg.NONE),
    Opt("list_reasons", ("list-reasons",), "R", Arg.NONE),
    Opt("node", ("Node",), "N", Arg.NONE),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("format", ("format",), "o"),
    Opt("Format", ("Format",), "O"),
    Opt("partition", ("partition",), "p"),
    Opt("nodes", ("nodes",), "n"),
    Opt("states", ("states",), "t"),
    Opt("reservation", ("reservation",), "T", Arg.NONE),  # sinfo_reservations
    Opt("sort", ("sort",), "S"),  # Slurm's sort list (sinfo_sort)
    Opt("all", ("all",), "a", Arg.NONE),  # hidden partitions: HAL has none
    # HAL already groups only nodes that print alike; -e also splits free memory and CPU
    # load (otherwise shown as min-max ranges over the group)
    Opt("exact", ("exact",), "e", Arg.NONE),
    # nodes whose agent answers / has missed its heartbeats (``*``: NOT_RESPONDING)
    Opt("responding", ("responding",), "r", Arg.NONE),
    Opt("dead", ("dead",), "d", Arg.NONE),
    Opt("clusters", ("clusters",), "M"),
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)


def _partition_name(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None:
        return "n/a"
    return p.name + ("*" if p.default else "")


def _limit(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None:
        return "n/a"
    return "infinite" if p.max_time_seconds <= 0 else duration_short(p.max_time_seconds)


def _gres(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    return NO_GRES if n is None else gres(n)


def _job_size(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None:
        return "n/a"
    return f"1-{p.max_nodes}" if p.max_nodes else "1-infinite"


def _gres_used(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    return NO_GRES if n is None else gres_used(n)


def _default_time(p: PartitionInfo | None, n: NodeInfo | None) -> str:
    if p is None or p.default_time_seconds <= 0:
        return "n/a"
    return duration_short(p.default_time_seconds)


def _node(get: Callable[[NodeInfo], str]) -> NodeColumn:
    return lambda p, n: get(n) if n is not None else "n/a"


def _mib(size: int) -> str:
    return str(size // (1024 * 1024))


def _features(node: NodeInfo) -> str:
    return ",".join(node.features) or "(null)"


def _reason_user(node: NodeInfo) -> str:
    """``%u``: who set the reason; ``Unknown`` for one stored before HAL recorded it."""
    return node.reason_user or "Unknown"


def _reason_user_long(node: NodeInfo) -> str:
    """``%U``: ``root(0)``; a name that is no local account has Slurm's NO_VAL uid."""
    return user_field(node.reason_user) if node.reason_user else "Unknown"


# Per-node columns; the aggregate ones (AGGREGATE_TITLES) are computed over a group of
# nodes. Keys longer than a letter are -O fields that have no -o letter.
NODE_LETTERS: dict[str, tuple[str, NodeColumn]] = {
    "P": ("PARTITION", _partition_name),
    "R": ("PARTITION", lambda p, n: p.name if p else "n/a"),
    # Slurm's up, down, drain, inact (the State's first five letters)
    "a": ("AVAIL", lambda p, n: p.state.lower()[:5] if p else "n/a"),
    "l": ("TIMELIMIT", _limit),
    "s": ("JOB_SIZE", _job_size),
    "r": ("ROOT", lambda p, n: "no"),
    "h": ("OVERSUBSCRIBE", lambda p, n: "NO"),
    "g": ("GROUPS", lambda p, n: "all"),
    "t": ("STATE", _node(state_compact)),
    "T": ("STATE", _node(state_long)),
    "c": ("CPUS", _node(lambda n: str(n.cpus))),
    "m": ("MEMORY", _node(lambda n: _mib(n.memory_bytes))),
    "alloc_mem": ("ALLOCMEM", _node(lambda n: _mib(n.memory_alloc_bytes))),
    "G": ("GRES", _gres),
    "gres_used": ("GRES_USED", _gres_used),
    "f": ("AVAIL_FEATURES", _node(_features)),
    "b": ("ACTIVE_FEATURES", _node(_features)),  # HAL's features are always active
    "E": ("REASON", _node(lambda n: n.reason or "none")),
    "u": ("USER", _node(_reason_user)),
    "U": ("USER", _node(_reason_user_long)),
    "H": ("TIMESTAMP", _node(lambda n: timestamp(n.reason_time, "Unknown"))),
    # A node configured with CPUs only reports that many sockets of one core (slurm.conf).
    "z": ("S:C:T", _node(lambda n: f"{n.cpus}:1:1")),
    "X": ("SOCKETS", _node(lambda n: str(n.cpus))),
    "Y": ("CORES", lambda p, n: "1"),
    "Z": ("THREADS", lambda p, n: "1"),
    "state_complete": ("STATECOMPLETE", _node(lambda n: scontrol_state(n).lower())),
    "d": ("TMP_DISK", lambda p, n: "0"),
    "w": ("WEIGHT", lambda p, n: "1"),
    "L": ("DEFAULTTIME", _default_time),
    "p": ("PRIO_TIER", lambda p, n: str(p.priority_tier) if p else "n/a"),
    "I": ("PRIO_JOB_FACTOR", lambda p, n: str(p.priority_job_factor) if p else "n/a"),
    "M": ("PREEMPT_MODE", lambda p, n: p.preempt_mode if p else "n/a"),
    # what holds for every HAL partition and node: any host may submit, no per-node CPU
    # cap, no federation; the agents' versions are not reported to clients
    "S": ("ALLOCNODES", lambda p, n: "all"),
    "B": ("MAX_CPUS_PER_NODE", lambda p, n: "UNLIMITED"),
    "V": ("CLUSTER", lambda p, n: "N/A"),
    "v": ("VERSION", lambda p, n: "N/A"),
    "comment": ("COMMENT", lambda p, n: "(null)"),
    "extra": ("EXTRA", lambda p, n: "(null)"),
}
# the letters a partition decides: without any, a row spans partitions
PARTITION_LETTERS = frozenset("PRalsrhgLIpMSB")
AGGREGATE_TITLES = {
    "D": "NODES",
    "N": "NODELIST",
    "n": "HOSTNAMES",
    "o": "NODE_ADDR",
    "F": "NODES(A/I/O/T)",
    "A": "NODES(A/I)",
    "C": "CPUS(A/I/O/T)",
    "e": "FREE_MEM",
    "O": "CPU_LOAD",
}
# -O names (any case) → the -o letter or NODE_LETTERS key they print. ``TimeLimit`` is
# HAL's alias of Slurm's ``Time``, after the column's title.
LONG_FIELDS: dict[str, str] = {
    "allocmem": "alloc_mem",
    "allocnodes": "S",
    "available": "a",
    "cluster": "V",
    "comment": "comment",
    "cores": "Y",
    "cpus": "c",
    "cpusload": "O",
    "cpusstate": "C",
    "defaulttime": "L",
    "disk": "d",
    "extra": "extra",
    "features": "f",
    "features_act": "b",
    "freemem": "e",
    "gres": "G",
    "gresused": "gres_used",
    "groups": "g",
    "maxcpuspernode": "B",
    "memory": "m",
    "nodeaddr": "o",
    "nodeai": "A",
    "nodeaiot": "F",
    "nodehost": "n",
    "nodelist": "N",
    "nodes": "D",
    "oversubscribe": "h",
    "partition": "P",
    "partitionname": "R",
    "preemptmode": "M",
    "priorityjobfactor": "I",
    "prioritytier": "p",
    "reason": "E",
    "root": "r",
    "size": "s",
    "socketcorethread": "z",
    "sockets": "X",
    "statecompact": "t",
    "statecomplete": "state_complete",
    "statelong": "T",
    "threads": "Z",
    "time": "l",
    "timelimit": "l",
    "timestamp": "H",
    "tmpdisk": "d",
    "user": "u",
    "userlong": "U",
    "version": "v",
    "weight": "w",
}
LONG_FIELD_WIDTH = 20  # sinfo -O: a field without a size is 20 wide


def sinfo(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sinfo"))
    opts = {dest: value for dest, value, _ in parsed.values}
    if "version" in opts:
        console.out(VERSION_LINE)
        return 0
    if {"help", "usage"} & opts.keys():
        console.out("Usage: sinfo [-h] [-s] [-N] [-R] [-l] [-o format] [-p partition] [-n nodes]")
        return 0
    if parsed.positionals:
        return console.error(f"Unrecognized option: {parsed.positionals[0]}")
    if "reservation" in opts:
        return _reservations(console, header="noheader" not in opts, dated="long" in opts)
    node_mode = "node" in opts
    reasons = "list_reasons" in opts
    try:
        layout, unknown = _layout(parsed.values, opts, node_mode=node_mode)
    except ValueError as err:
        return console.error(str(err))
    for line in unknown:  # Slurm 22.05.8 says so and goes on, exit code 0
        console.err(line)
    try:
        partitions = console.client.partitions(validate=False)
        nodes = console.client.nodes(validate=False)
        wanted_nodes = (
            set(expand_hostlist(opts["nodes"] or "", field="nodes")) if "nodes" in opts else None
        )
    except HalError as err:
        return console.error(err.message)
    wanted_parts = set((opts.get("partition") or "").split(",")) if "partition" in opts else None
    try:
        if "states" in opts:
            wanted_states = parse_node_states(opts["states"] or "")
        else:
            wanted_states = parse_node_states(REASON_STATES) if reasons else None
    except ValueError as err:
        return console.error(str(err))
    partitions = [p for p in partitions if wanted_parts is None or p.name in wanted_parts]
    nodes = [
        n
        for n in nodes
        if (wanted_nodes is None or n.name in wanted_nodes)
        and (wanted_states is None or state_matches(n, wanted_states))
        and ("responding" not in opts or NOT_RESPONDING not in n.state_flags)
        and ("dead" not in opts or NOT_RESPONDING in n.state_flags)
    ]
    groups = _groups(
        layout,
        partitions,
        nodes,
        node_mode=node_mode,
        exact="exact" in opts,
        once=reasons,
    )
    # -S, else Slurm's defaults (docs/slurm-checks.md "sinfo's row order")
    default_sort = NODE_SORT if node_mode else DEFAULT_SORT
    sort_rows(groups, opts["sort"] or "" if "sort" in opts else default_sort, partitions)
    if "long" in opts and "noheader" not in opts:
        console.out(_date_line(console))
    for line in sinfo_lines(layout, groups, header="noheader" not in opts):
        console.out(line)
    return 0


def _date_line(console: Console) -> str:
    """``-l``'s first line: ``Sat Nov 28 17:04:13 2026``."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(console.clock()))


def _reservations(console: Console, *, header: bool, dated: bool) -> int:
    """``-T``: the reservations, whatever the other options ask (as Slurm's)."""
    try:
        found = console.client.reservations(validate=False)
    except HalError as err:
        return console.error(err.message)
    if dated and header:
        console.out(_date_line(console))
    for line in reservation_lines(found, header=header):
        console.out(line)
    return 0


def _layout(
    given: tuple[tuple[str, str | None, str], ...], opts: dict[str, str | None], *, node_mode: bool
) -> tuple[list[Field | str], list[str]]:
    """The columns: the last ``-o``/``-O`` given, else the format of ``-s``, ``-N``,
    ``-R``, ``-l``; and the lines for stderr about the fields sinfo does not know, as
    Slurm 22.05.8 prints them: a ``-o`` letter prints as the text it was given (``%Q``,
    ``Invalid node format specification: Q``), a ``-O`` name is dropped, only its suffix
    printed (``sinfo: error: Invalid job format specification: Bogus``, Slurm's "job").
    As Slurm's, sinfo keeps one format and a mark that ``-O`` came: with a ``-O``
    anywhere, the last value given is read as a ``-O`` list, an ``-o`` after it too
    (``-O NodeList -o %N``: ``Invalid job format specification: %N``). An empty ``-o``
    or ``-O`` has no columns: an empty line for the title and each row, rc 0."""
    formats = [(dest, text or "") for dest, text, _ in given if dest in ("format", "Format")]
    if formats:
        text = formats[-1][1]
        long_names = any(dest == "Format" for dest, _ in formats)
        if text.strip().lower() == ("all" if long_names else "%all"):
            text = ALL_FORMAT
        elif long_names:
            names: list[str] = []
            layout = parse_long_names(text, LONG_FIELDS, LONG_FIELD_WIDTH, unknown=names)
            return layout, [f"sinfo: error: Invalid job format specification: {n}" for n in names]
        fmt = text
    elif "summarize" in opts:
        fmt = SUMMARIZE_FORMAT
    elif node_mode:
        fmt = NODE_LONG_FORMAT if "long" in opts else NODE_FORMAT
    elif "list_reasons" in opts:
        fmt = REASONS_LONG_FORMAT if "long" in opts else REASONS_FORMAT
    else:
        fmt = LONG_FORMAT if "long" in opts else DEFAULT_FORMAT
    layout = []
    unknown: list[str] = []
    for part in parse_format(fmt):
        if isinstance(part, Field) and part.letter not in NODE_LETTERS | AGGREGATE_TITLES:
            unknown.append(f"Invalid node format specification: {part.letter}")
            part = _spelled(part)
        layout.append(part)
    return layout, unknown


def _spelled(field: Field) -> str:
    """A field as it was written: ``%.5Q``."""
    width = str(field.width) if field.width else ""
    return f"%{'.' if field.right else ''}{'#' if field.auto else ''}{width}{field.letter}"


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
    exact: bool = False,
    once: bool = False,
) -> list[tuple[PartitionInfo | None, list[NodeInfo]]]:
    """Groups of nodes that print on one line, in partition order then node order. Free
    memory and CPU load change all the time: they split groups only with ``exact``
    (``-e``), else they print as ranges. Without a partition column a group spans
    partitions and a node is in one only; ``once`` (``-R``) puts each node in one group
    whatever the columns, under its first partition. With a partition column (``%P``,
    ``%R``) a partition no node is left in still has its row, of no nodes, as Slurm
    22.05.8 prints it after ``-t``, ``-n``, ``-r``, ``-d`` (and none without one)."""
    shown = [p.letter for p in layout if isinstance(p, Field)]
    per_node = [letter for letter in shown if letter in NODE_LETTERS]
    if exact:
        per_node += [letter for letter in shown if letter in _MEASURED]
    by_name = sorted(nodes, key=lambda n: n.name)
    groups: list[tuple[PartitionInfo | None, list[NodeInfo]]] = []
    if node_mode:  # Slurm's "N": by node, then by partition name
        held = [(p, set(p.nodes)) for p in sorted(partitions, key=lambda p: p.name)]
        for node in by_name:
            groups += [(partition, [node]) for partition, names in held if node.name in names]
        return groups
    spans = not PARTITION_LETTERS & set(shown)
    every_partition = bool({"P", "R"} & set(shown))
    once = once or spans
    placed: set[str] = set()
    slots: dict[tuple[str, tuple[str, ...]], list[NodeInfo]] = {}
    for partition in partitions:
        members = _members(partition, by_name)
        if not members:
            if every_partition:
                groups.append((partition, []))
            continue
        if once:
            members = [n for n in members if n.name not in placed]
            placed.update(n.name for n in members)
        for node in members:
            key = tuple(_column(letter, partition, node) for letter in per_node)
            slot = ("" if spans else partition.name, key)
            if slot not in slots:
                slots[slot] = []
                groups.append((partition, slots[slot]))
            slots[slot].append(node)
    for _, members in groups:
        members.sort(key=lambda n: n.name)
    return groups


def _free_mem(nodes: list[NodeInfo]) -> str:
    """``%e``: MiB available, ``min-max`` over the group; ``N/A`` when no agent said."""
    known = [n.free_memory_bytes // (1024 * 1024) for n in nodes if n.free_memory_bytes is not None]
    return _range([str(v) for v in (min(known), max(known))] if known else [])


def _cpu_load(nodes: list[NodeInfo]) -> str:
    """``%O``: the 1-minute load average, ``0.05-1.20`` over the group, or ``N/A``."""
    known = [n.cpu_load for n in nodes if n.cpu_load is not None]
    return _range([f"{v:.2f}" for v in (min(known), max(known))] if known else [])


def _range(bounds: list[str]) -> str:
    if not bounds:
        return "N/A"
    low, high = bounds
    return low if low == high else f"{low}-{high}"


# measured by the agents: per group unless -e
_MEASURED: dict[str, Callable[[list[NodeInfo]], str]] = {"e": _free_mem, "O": _cpu_load}


def _column(letter: str, partition: PartitionInfo | None, node: NodeInfo) -> str:
    if letter in _MEASURED:
        return _MEASURED[letter]([node])
    return NODE_LETTERS[letter][1](partition, node)


def _addresses(nodes: list[NodeInfo]) -> str:
    return compress_hostlist([n.address or n.name for n in nodes])


def _counts(nodes: list[NodeInfo]) -> tuple[str, str]:
    alloc = sum(n.display_state in _ALLOCATED for n in nodes)
    idle = sum(n.display_state == "idle" for n in nodes)
    other = len(nodes) - alloc - idle
    cpu_alloc = sum(n.cpus_alloc for n in nodes if n.display_state in _ALLOCATED)
    cpu_idle = sum(n.cpus - n.cpus_alloc for n in nodes if n.display_state in _USABLE)
    cpu_total = sum(n.cpus for n in nodes)
    cpu_other = cpu_total - cpu_alloc - cpu_idle
    return (
        f"{alloc}/{idle}/{other}/{len(nodes)}",
        f"{cpu_alloc}/{cpu_idle}/{cpu_other}/{cpu_total}",
    )


# A row of no nodes (a partition a filter emptied), as Slurm 22.05.8 prints its node
# columns: zeros, the reason fields of uid 0, ``n/a`` only for the state
EMPTY_ROW = {
    "c": "0",
    "m": "0",
    "d": "0",
    "w": "0",
    "e": "0",
    "O": "0.00",
    "z": "0:0:0",
    "X": "0",
    "Y": "0",
    "Z": "0",
    "f": "(null)",
    "b": "(null)",
    "G": "(null)",
    "E": "none",
    "u": "root",
    "U": "root(0)",
    "H": "Unknown",
    "A": "0/0",
}


def _cut_partition(value: str, width: int) -> str:
    """``%5P`` of the default partition: ``debu*``, the mark kept (Slurm 22.05.8)."""
    if width and value.endswith("*") and len(value) > width:
        return value[: width - 1] + "*"
    return value


def sinfo_lines(
    layout: list[Field | str],
    groups: list[tuple[PartitionInfo | None, list[NodeInfo]]],
    *,
    header: bool,
) -> list[str]:
    # each sized partition column its own key: its value is cut before render_rows cuts it
    cut = {
        index: f"P{part.width}"
        for index, part in enumerate(layout)
        if isinstance(part, Field) and part.letter == "P" and part.width and not part.auto
    }
    layout = [
        Field(cut[index], part.width, part.right, part.auto)
        if isinstance(part, Field) and index in cut
        else part
        for index, part in enumerate(layout)
    ]
    letters = {p.letter for p in layout if isinstance(p, Field)} - set(cut.values())
    titles = {letter: AGGREGATE_TITLES.get(letter) or NODE_LETTERS[letter][0] for letter in letters}
    titles.update({key: NODE_LETTERS["P"][0] for key in cut.values()})
    rows = []
    for partition, members in groups:
        first = members[0] if members else None
        row = {
            letter: NODE_LETTERS[letter][1](partition, first)
            for letter in letters
            if letter in NODE_LETTERS
        }
        nodes_aiot, cpus_aiot = _counts(members)
        names = compress_hostlist([n.name for n in members])
        row.update(
            D=str(len(members)),
            N=names,
            n=names,  # HAL's nodes are named after their hosts
            o=_addresses(members) if "o" in letters else "",
            F=nodes_aiot,
            A="/".join(nodes_aiot.split("/")[:2]),
            C=cpus_aiot,
            e=_free_mem(members),
            O=_cpu_load(members),
        )
        if not members:
            row.update({letter: EMPTY_ROW[letter] for letter in letters & EMPTY_ROW.keys()})
        partition_name = _partition_name(partition, first)
        row.update({key: _cut_partition(partition_name, int(key[1:])) for key in cut.values()})
        rows.append(row)
    return render_rows(layout, titles, rows, header=header, whole_titles=("N",))
