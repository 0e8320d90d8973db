"""The ``sacctmgr`` command, read-only: ``show``/``list`` of ``assoc``, ``user``,
``account`` and ``qos``, from hal.toml's ``[[accounts]]``, ``[[users]]`` and ``[[qos]]``
(``GET /v1/associations``).

``sacctmgr [-n] [-p|-P] [-s] show ENTITY [where] [NAME ...] [key=value ...]``: bare
words name users, accounts or QoS (``withassoc``, ``tree``, ``withdeleted`` are flags);
``names=``, ``user(s)=``, ``account(s)=``/``acct=`` and ``cluster(s)=`` filter;
``format=`` picks fields (``Account%256``). Snakemake's executor calls ``sacctmgr -nP
show user names=$USER format=defaultaccount`` (the account to charge) and ``sacctmgr -n
-s list user $USER format=account%256`` (the accounts one may name).

HAL keeps no association database: ``add``, ``modify``, ``delete`` ... are refused,
naming the config. Columns HAL has no value for (Partition, Priority, GrpWall, the
TRES-minutes limits, per-user QoS limits on TRES, Def QOS) print empty; user
associations carry no limits of their own (an account's limits bind its users' jobs,
docs/admin/priority.md); the QOS column lists every QoS, which every user may use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from hal.compat import sacctmgr_fields as fields
from hal.compat.formats import parsable_mode
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError

if TYPE_CHECKING:
    from hal.wire.accounts import AccountRecord, AssociationList, QosRecord

OPTIONS = (
    Opt("noheader", ("noheader",), "n", Arg.NONE),
    Opt("parsable", ("parsable",), "p", Arg.NONE),
    Opt("parsable2", ("parsable2",), "P", Arg.NONE),
    Opt("withassoc", ("associations",), "s", Arg.NONE),
    Opt("immediate", ("immediate",), "i", Arg.NONE),
    Opt("quiet", ("quiet",), "Q", Arg.NONE),
    Opt("readonly", ("readonly",), "r", Arg.NONE),
    Opt("verbose", ("verbose",), "v", Arg.NONE),
    Opt("cluster", ("cluster",), "M"),
    Opt("help", ("help",), "h", Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)
USAGE = (
    "Usage: sacctmgr [-n] [-p|-P] [-s] show|list assoc|user|account|qos "
    "[names] [user=U] [account=A] [format=...] [withassoc] [tree]"
)
READ_ONLY = (
    "HAL's sacctmgr only shows: accounts, users and QOS are configured in hal.toml "
    "([[accounts]], [[users]], [[qos]]; docs/admin/priority.md). Edit hal.toml and run "
    "`scontrol reconfigure` (an administrator) to change them."
)
WRITES = {
    "add", "create", "modify", "update", "delete", "remove", "archive", "load", "dump",
    "reconfigure", "shutdown", "clear",
}  # fmt: skip
ENTITIES = {
    "assoc": "assoc", "association": "assoc", "associations": "assoc",
    "user": "user", "users": "user",
    "account": "account", "accounts": "account", "acct": "account",
    "qos": "qos",
}  # fmt: skip
USAGE_ENTITIES = "assoc, user, account and qos"
FLAGS = {"withassoc", "withassocs", "withdeleted", "tree", "where"}
FILTERS = {
    "name": "names", "names": "names",
    "user": "users", "users": "users",
    "account": "accounts", "accounts": "accounts", "acct": "accounts", "accts": "accounts",
    "cluster": "clusters", "clusters": "clusters",
}  # fmt: skip
# The default formats, as in Slurm 22.05's sacctmgr binary (its strings)
DEFAULTS = {
    "assoc": "cluster,account,user,partition,share,priority,grpjobs,grptres,grpsubmit,"
    "grpwall,grptresmins,maxjobs,maxtres,maxtrespernode,maxsubmit,maxwall,maxtresmins,qos,"
    "defaultqos,grptresrunmins",
    "user": "user,defaultaccount,admin",
    # (the pre-TRES names, as Slurm 22.05's binary still has them for these two)
    "user+assoc": "user,defaultaccount,admin,cluster,account,partition,share,priority,"
    "maxjobs,maxnodes,maxcpus,maxsubmit,maxwall,maxcpumins,qos,defaultqos",
    "account": "account,description,organization",
    "account+assoc": "account,description,organization,cluster,parentname,user,share,"
    "priority,grpjobs,grpnodes,grpcpus,grpmem,grpsubmit,grpwall,grpcpumins,maxjobs,maxnodes,"
    "maxcpus,maxsubmit,maxwall,maxcpumins,qos,defaultqos",
    "qos": "name,priority,gracetime,preempt,preemptexempttime,preemptmode,flags,usagethres,"
    "usagefactor,grptres,grptresmins,grptresrunmins,grpjobs,grpsubmit,grpwall,maxtres,"
    "maxtrespernode,maxtresmins,maxwall,maxtrespu,maxjobspu,maxsubmitpu,maxtrespa,maxjobspa,"
    "maxsubmitpa,mintres",
}


class AssociationClient(Protocol):
    def associations(self) -> AssociationList: ...


class Request:
    """What ``show ENTITY ...`` asked for."""

    def __init__(self, entity: str) -> None:
        self.entity = entity
        self.withassoc = False
        self.tree = False
        self.format: str | None = None
        self.filters: dict[str, set[str]] = {}

    def wants(self, key: str, value: str) -> bool:
        chosen = self.filters.get(key)
        return chosen is None or value.lower() in chosen


def parse_request(words: list[str]) -> Request:
    """``ENTITY [where] [NAME ...] [key=value ...]`` → a ``Request`` (``ValueError``:
    what is wrong, in sacctmgr's words)."""
    if not words:
        raise ValueError("show needs what to show: assoc, user, account or qos")
    entity = ENTITIES.get(words[0].lower())
    if entity is None:
        raise ValueError(f"Unknown entity '{words[0]}': HAL's sacctmgr shows {USAGE_ENTITIES}")
    request = Request(entity)
    for word in words[1:]:
        key, eq, value = word.partition("=")
        lower = key.lower()
        if not eq:
            if lower in ("withassoc", "withassocs"):
                request.withassoc = True
            elif lower == "tree":
                request.tree = True
            elif lower not in FLAGS:  # a bare name: users, accounts or QoS by entity
                request.filters.setdefault("names", set()).update(_split(word))
        elif lower == "format":
            request.format = value
        elif lower in FILTERS:
            request.filters.setdefault(FILTERS[lower], set()).update(_split(value))
        else:
            raise ValueError(f"Unknown condition: {word}")
    return request


def _split(text: str) -> list[str]:
    return [t.strip().lower() for t in text.split(",") if t.strip()]


def _org(accounts: dict[str, AccountRecord], name: str) -> str:
    """Slurm's default Organization: an account's top-level ancestor below root (the
    account itself at the top; ``root`` for root)."""
    seen: set[str] = set()
    while name in accounts and accounts[name].parent not in ("", "root") and name not in seen:
        seen.add(name)
        name = accounts[name].parent
    return name


def assoc_rows(found: AssociationList, *, tree: bool) -> list[dict[str, str]]:
    """Every association in Slurm's hierarchical order: an account, its users (by
    name), then its sub-accounts (by name), depth first from root."""
    accounts = {a.name: a for a in found.accounts}
    children: dict[str, list[str]] = {}
    for a in found.accounts:
        children.setdefault(a.parent, []).append(a.name)
    users: dict[str, list[str]] = {}
    shares = {(u.account, u.user): u.shares for u in found.users}
    for u in found.users:
        users.setdefault(u.account, []).append(u.user)
    qos = ",".join(sorted(q.name for q in found.qos))
    rows: list[dict[str, str]] = []

    def walk(name: str, depth: int) -> None:
        a = accounts[name]
        indent = " " * depth if tree else ""
        org = _org(accounts, name)
        rows.append(
            {
                "cluster": found.cluster,
                "account": indent + name,
                "share": str(a.shares),
                "grpjobs": fields.count(a.grp_jobs),
                "grptres": fields.tres(a.grp_tres),
                "grpcpus": fields.count(a.grp_tres.cpus),
                "grpmem": fields.mem_mb(a.grp_tres.memory_bytes),
                "grpnodes": fields.count(a.grp_tres.nodes),
                "maxcpus": fields.count(a.max_tres_per_job.cpus),
                "maxnodes": fields.count(a.max_tres_per_job.nodes),
                "grpsubmit": fields.count(a.grp_submit_jobs),
                "maxjobs": fields.count(a.max_jobs),
                "maxtres": fields.tres(a.max_tres_per_job),
                "maxsubmit": fields.count(a.max_submit_jobs),
                "maxwall": fields.wall(a.max_wall_seconds),
                "qos": qos,
                "parentname": a.parent,
                "description": name,
                "organization": org,
                "_account": name,
                "_user": "",
            }
        )
        for user in sorted(users.get(name, [])):
            rows.append(
                {
                    "cluster": found.cluster,
                    "account": (" " * (depth + 1) if tree else "") + name,
                    "user": user,
                    "share": str(shares[(name, user)]),
                    "qos": qos,
                    "description": name,
                    "organization": org,
                    "_account": name,
                    "_user": user,
                }
            )
        for child in sorted(children.get(name, [])):
            walk(child, depth + 1)

    walk("root", 0)
    return rows


def _admin(admin: bool) -> str:
    return "Administrator" if admin else "None"


def user_rows(found: AssociationList, request: Request) -> list[dict[str, str]]:
    """One row per configured user (by name); ``withassoc``: one per association."""
    default: dict[str, str] = {}
    admin: dict[str, bool] = {}
    for u in found.users:
        admin[u.user] = u.admin
        if u.default:
            default[u.user] = u.account
    wanted = [u for u in sorted(admin) if request.wants("names", u) and request.wants("users", u)]
    assocs = [
        r
        for r in assoc_rows(found, tree=False)
        if r["_user"] in wanted and request.wants("accounts", r["_account"])
    ]
    if request.withassoc:
        return [
            {**r, "defaultaccount": default[r["_user"]], "admin": _admin(admin[r["_user"]])}
            for u in wanted
            for r in assocs
            if r["_user"] == u
        ]
    having = {r["_user"] for r in assocs}  # account=: users with an association there
    return [
        {"user": u, "defaultaccount": default[u], "admin": _admin(admin[u])}
        for u in wanted
        if u in having
    ]


def account_rows(found: AssociationList, request: Request) -> list[dict[str, str]]:
    """One row per account (by name); ``withassoc``: its own association and its users'."""
    names = sorted(a.name for a in found.accounts)
    wanted = {n for n in names if request.wants("names", n) and request.wants("accounts", n)}
    rows = [
        r for r in assoc_rows(found, tree=False)
        if r["_account"] in wanted and (not r["_user"] or request.wants("users", r["_user"]))
    ]  # fmt: skip
    if request.withassoc:
        return sorted(rows, key=lambda r: r["_account"])  # stable: the account's row first
    return sorted((r for r in rows if not r["_user"]), key=lambda r: r["_account"])


def _qos_row(q: QosRecord) -> dict[str, str]:
    return {
        "name": q.name,
        "priority": str(q.priority),
        "gracetime": fields.wall(q.grace_time_seconds),
        "preempt": ",".join(sorted(q.preempt)),
        "preemptmode": q.preempt_mode or "cluster",
        "usagefactor": "1.000000",  # HAL charges every QoS's usage as it is
        "grptres": fields.tres(q.grp_tres),
        "grpjobs": fields.count(q.grp_jobs),
        "maxtres": fields.tres(q.max_tres_per_job),
        "maxwall": fields.wall(q.max_wall_seconds),
        "maxjobspu": fields.count(q.max_jobs_per_user),
        "maxsubmitpu": fields.count(q.max_submit_jobs_per_user),
    }


def rows_for(found: AssociationList, request: Request) -> list[dict[str, str]]:
    if request.filters.get("clusters") and not request.wants("clusters", found.cluster):
        return []
    if request.entity == "assoc":  # user= (or a bare name): only those users' rows
        users = request.filters.get("users", set()) | request.filters.get("names", set())
        return [
            r
            for r in assoc_rows(found, tree=request.tree)
            if request.wants("accounts", r["_account"])
            and (not users or r["_user"].lower() in users)
        ]
    if request.entity == "user":
        return user_rows(found, request)
    if request.entity == "account":
        return account_rows(found, request)
    return [_qos_row(q) for q in found.qos if request.wants("names", q.name)]


def _columns(request: Request) -> list[fields.Column]:
    if request.format is not None:
        columns = fields.parse_format(request.format)
        if request.tree:  # the tree display's Account, unless a width was given
            columns = [(f, -20 if f.key == "account" and w == f.width else w) for f, w in columns]
        if not columns:
            raise ValueError("format= needs fields, e.g. format=Account,User")
        return columns
    key = request.entity + ("+assoc" if request.withassoc and request.entity != "assoc" else "")
    columns = fields.default_columns(DEFAULTS.get(key, DEFAULTS[request.entity]), tree=request.tree)
    if request.entity == "qos":  # Slurm's default format asks for Flags%40
        columns = [(f, 40 if f.key == "flags" else w) for f, w in columns]
    return columns


def sacctmgr(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sacctmgr"))
    opts = {dest: value for dest, value, _ in parsed.values}
    words = list(parsed.positionals)
    verb = words[0].lower() if words else ""
    if "version" in opts or verb == "version":
        console.out(VERSION_LINE)
        return 0
    if {"help", "usage"} & opts.keys() or verb == "help":
        console.out(USAGE)
        return 0
    if verb in WRITES:
        return console.error(READ_ONLY)
    if verb not in ("show", "list"):
        what = f"Invalid command: {words[0]}" if words else "no command given"
        return console.error(f"{what}. {USAGE}")
    try:
        request = parse_request(words[1:])
        request.withassoc = request.withassoc or "withassoc" in opts
        if opts.get("cluster"):  # -M CLUSTER
            request.filters.setdefault("clusters", set()).update(_split(opts["cluster"] or ""))
        columns = _columns(request)
        found = cast(AssociationClient, console.client).associations()
    except ValueError as err:
        return console.error(str(err))
    except HalError as err:
        return console.error(err.message)
    parsable = parsable_mode(opts)
    rows = rows_for(found, request)
    for line in fields.table(rows, columns, header="noheader" not in opts, parsable=parsable):
        console.out(line)
    return 0
