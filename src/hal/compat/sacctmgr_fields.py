"""``sacctmgr``'s output fields: names, titles, widths and the print layout.

The default formats (``hal.compat.sacctmgr``) are the ones in Slurm 22.05's sacctmgr
binary (its strings); the titles and widths are from ``src/sacctmgr/common.c`` as
remembered and the layout from ``src/common/print_fields.c``, not checked against a
running slurmdbd: a title is right-aligned in its width and cut to it
(``GrpTRESRunMins`` shows as ``GrpTRESRunMin``); a value too long for its column is cut
with a ``+``; a negative width left-aligns; ``-P`` joins the values with ``|``, ``-p``
ends each line with one too. Lines carry no trailing blanks (as HAL's sshare).
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.compat.formats import duration_long, parse_print_fields, print_fields
from hal.wire.priority import TresInfo


@dataclass(frozen=True, slots=True)
class Field:
    """``key``: the row value it prints; ``names``: the spellings ``format=`` takes
    (lower case; any prefix of one matches, the first field in ``FIELDS`` winning)."""

    key: str
    title: str
    width: int
    names: tuple[str, ...]


Column = tuple[Field, int]  # a field and the width it is printed in

# Order matters for prefixes: "MaxJ" is MaxJobs, "U" User, "A" Account, as in Slurm.
FIELDS = (
    Field("account", "Account", 10, ("account", "acct")),
    Field("admin", "Admin", 9, ("adminlevel", "admin")),
    Field("cluster", "Cluster", 10, ("cluster",)),
    Field("defaultaccount", "Def Acct", 10, ("defaultaccount", "defacct")),
    Field("defaultqos", "Def QOS", 9, ("defaultqos", "defqos")),
    Field("description", "Descr", 20, ("description", "descr")),
    Field("flags", "Flags", 10, ("flags",)),
    Field("gracetime", "GraceTime", 10, ("gracetime",)),
    Field("grpcpumins", "GrpCPUMins", 11, ("grpcpumins",)),
    Field("grpcpus", "GrpCPUs", 8, ("grpcpus",)),
    Field("grpjobs", "GrpJobs", 7, ("grpjobs",)),
    Field("grpmem", "GrpMem", 7, ("grpmem",)),
    Field("grpnodes", "GrpNodes", 8, ("grpnodes",)),
    Field("grpsubmit", "GrpSubmit", 9, ("grpsubmitjobs", "grpsubmit")),
    Field("grptres", "GrpTRES", 13, ("grptres",)),
    Field("grptresmins", "GrpTRESMins", 13, ("grptresmins",)),
    Field("grptresrunmins", "GrpTRESRunMins", 13, ("grptresrunmins",)),
    Field("grpwall", "GrpWall", 11, ("grpwall",)),
    Field("maxcpumins", "MaxCPUMins", 11, ("maxcpumins",)),
    Field("maxcpus", "MaxCPUs", 8, ("maxcpus",)),
    Field("maxjobs", "MaxJobs", 7, ("maxjobs",)),
    Field("maxjobspa", "MaxJobsPA", 9, ("maxjobspa", "maxjobsperaccount")),
    Field("maxjobspu", "MaxJobsPU", 9, ("maxjobspu", "maxjobsperuser")),
    Field("maxnodes", "MaxNodes", 8, ("maxnodes",)),
    Field("maxsubmit", "MaxSubmit", 9, ("maxsubmitjobs", "maxsubmit")),
    Field("maxsubmitpa", "MaxSubmitPA", 11, ("maxsubmitpa", "maxsubmitjobsperaccount")),
    Field("maxsubmitpu", "MaxSubmitPU", 11, ("maxsubmitpu", "maxsubmitjobsperuser")),
    Field("maxtres", "MaxTRES", 13, ("maxtres", "maxtresperjob")),
    Field("maxtresmins", "MaxTRESMins", 13, ("maxtresmins", "maxtresminsperjob")),
    Field("maxtrespa", "MaxTRESPA", 13, ("maxtrespa", "maxtresperaccount")),
    Field("maxtrespernode", "MaxTRESPerNode", 14, ("maxtrespernode", "maxtrespn")),
    Field("maxtrespu", "MaxTRESPU", 13, ("maxtrespu", "maxtresperuser")),
    Field("maxwall", "MaxWall", 11, ("maxwall", "maxwalldurationperjob")),
    Field("mintres", "MinTRES", 13, ("mintres", "mintresperjob")),
    Field("name", "Name", 10, ("name",)),
    Field("organization", "Org", 20, ("organization", "org")),
    Field("parentname", "Par Name", 10, ("parentname", "parent")),
    Field("partition", "Partition", 10, ("partition",)),
    Field("preempt", "Preempt", 10, ("preempt",)),
    Field("preemptexempttime", "PreemptExemptTime", 19, ("preemptexempttime",)),
    Field("preemptmode", "PreemptMode", 11, ("preemptmode",)),
    Field("priority", "Priority", 10, ("priority",)),
    Field("qos", "QOS", 20, ("qos",)),
    Field("share", "Share", 9, ("share", "shares", "fairshare")),
    Field("user", "User", 10, ("user", "users")),
    Field("usagefactor", "UsageFactor", 11, ("usagefactor",)),
    Field("usagethres", "UsageThres", 10, ("usagethreshold", "usagethres")),
)
BY_KEY = {f.key: f for f in FIELDS}


def find_field(name: str) -> Field | None:
    lower = name.strip().lower()
    if not lower:
        return None
    for f in FIELDS:
        if lower in f.names:
            return f
    for f in FIELDS:
        if any(n.startswith(lower) for n in f.names):
            return f
    return None


def parse_format(text: str) -> list[Column]:
    """``format=Account%256,User`` → columns; ``%N`` sets the width (Slurm's atoi: a
    negative one left-aligns). An unknown name is a ``ValueError`` naming it."""
    return parse_print_fields(
        text, find_field, lambda f: f.width, unknown=lambda name: f"Unknown field '{name}'",
        signed=True,
    )  # fmt: skip


def default_columns(keys: str, *, tree: bool = False) -> list[Column]:
    """The columns of ``keys`` (comma-separated field keys) at their default widths; the
    tree display left-aligns Account in 20."""
    columns: list[Column] = []
    for key in keys.split(","):
        f = BY_KEY[key]
        columns.append((f, -20 if tree and key == "account" else f.width))
    return columns


def table(
    rows: list[dict[str, str]], columns: list[Column], *, header: bool, parsable: str
) -> list[str]:
    """The lines to print (``parsable``: ``formats.parsable_mode``). A key a row lacks
    prints empty."""
    shown = [(f.title, width) for f, width in columns]
    values = [[row.get(f.key, "") for f, _ in columns] for row in rows]
    return print_fields(shown, values, header=header, parsable=parsable)


def count(value: int | None) -> str:
    return "" if value is None else str(value)


def wall(seconds: int | float | None) -> str:
    """MaxWall / GraceTime: ``HH:MM:SS`` or ``D-HH:MM:SS`` (empty: no limit)."""
    return "" if seconds is None else duration_long(seconds)


def _mem(mem_bytes: int) -> str:
    """Memory as Slurm's TRES strings show it: MiB in the largest unit it is a whole
    number of (``2T``, ``512G``, ``1000M``)."""
    value = -(-mem_bytes // 2**20)
    unit = 0
    while value and value % 1024 == 0 and unit < 4:
        value //= 1024
        unit += 1
    return f"{value}{'MGTPE'[unit]}"


def mem_mb(mem_bytes: int | None) -> str:
    """GrpMem: MiB, as a plain number."""
    return "" if mem_bytes is None else str(-(-mem_bytes // 2**20))


def tres(limits: TresInfo) -> str:
    """``cpu=512,mem=2T,node=32,gres/gpu=16``: the capped TRES in Slurm's TRES-id order
    (cpu, mem, node, then GRES); empty when nothing is capped."""
    parts = []
    if limits.cpus is not None:
        parts.append(f"cpu={limits.cpus}")
    if limits.memory_bytes is not None:
        parts.append(f"mem={_mem(limits.memory_bytes)}")
    if limits.nodes is not None:
        parts.append(f"node={limits.nodes}")
    if limits.gpus is not None:
        parts.append(f"gres/gpu={limits.gpus}")
    return ",".join(parts)
