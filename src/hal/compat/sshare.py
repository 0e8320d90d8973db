"""The ``sshare`` command: the fair-share tree, Slurm 22.05's classic layout.

Accounts are indented one space per level; without ``-a`` only the caller's own user
associations are listed (with every account), ``-u`` picks users, ``-A`` an account's
subtree, ``-U`` only the user rows (no account lines). ``-l`` adds ``NormUsage``,
``LevelFS``, ``GrpTRESMins`` and ``TRESRunMins``, as Slurm 22.05.8's; ``-o`` picks the
fields (``Account,User%12,TRESRunMins%60``; ``-e`` lists them); ``-P``/``-p`` print
``|``-separated values; ``-n`` drops the header. A value too long for its column is cut
with a ``+``, as Slurm's print_fields; titles are aligned as their values (``Account``
to the left) and every line ends with a blank, as Slurm's (checked on the peer).
``RawUsage`` is decayed billing-seconds (CPU-seconds plus weighted GPU-seconds), as an
integer; ``TRESRunMins`` what the running jobs still hold (``api/tres_run.py``);
``GrpTRESMins`` is empty (HAL has no TRES-minutes limits: Slurm's value for none).

``FairShare`` is the factor of the server's algorithm (``[priority]
fairshare_algorithm``). With fair tree, ``NormShares`` and ``EffectvUsage`` are relative
to the siblings, accounts have no ``FairShare`` (empty) and ``LevelFS`` is S / U (``inf``
for an association that used nothing); with classic ``LevelFS`` is empty, as in Slurm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from hal.compat.formats import parsable_mode, parse_print_fields, print_fields
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError
from hal.wire.bounds import LEVEL_FS_INFINITE

if TYPE_CHECKING:
    from hal.wire.priority import ShareInfo, ShareList

OPTIONS = (
    Opt("all", ("all",), "a", Arg.NONE),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("users", ("users", "user"), "u"),
    Opt("users_only", ("Users",), "U", Arg.NONE),
    Opt("accounts", ("accounts", "account"), "A"),
    Opt("format", ("format",), "o"),
    Opt("helpformat", ("helpformat",), "e", Arg.NONE),
    Opt("noheader", ("noheader",), "n", Arg.NONE),
    Opt("parsable", ("parsable",), "p", Arg.NONE),
    Opt("parsable2", ("parsable2",), "P", Arg.NONE),
    Opt("clusters", ("clusters",), "M"),
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)

# -o names → (title, width); a negative width is left-aligned, as Slurm's print_fields
FIELDS: dict[str, tuple[str, int]] = {
    "account": ("Account", -20),
    "user": ("User", 10),
    "rawshares": ("RawShares", 10),
    "normshares": ("NormShares", 11),
    "rawusage": ("RawUsage", 11),
    "normusage": ("NormUsage", 11),
    "effectvusage": ("EffectvUsage", 13),
    "fairshare": ("FairShare", 10),
    "levelfs": ("LevelFS", 10),
    "grptresmins": ("GrpTRESMins", 30),
    "tresrunmins": ("TRESRunMins", 30),
}
Column = tuple[str, int]
COLUMNS: list[Column] = [
    FIELDS[name]
    for name in (
        "account", "user", "rawshares", "normshares", "rawusage", "effectvusage", "fairshare",
    )
]  # fmt: skip
LONG_COLUMNS: list[Column] = [
    *COLUMNS[:5], FIELDS["normusage"], *COLUMNS[5:], FIELDS["levelfs"],
    FIELDS["grptresmins"], FIELDS["tresrunmins"],
]  # fmt: skip
TRES_ORDER = ("cpu", "mem", "node", "billing", "gres/gpu")


def parse_fields(text: str) -> list[Column]:
    """``-o Account,User%12,TRESRunMins%60`` → columns; ``%N`` sets the width. An unknown
    name or a bad width is a ``ValueError`` saying what to write."""
    known = ", ".join(title for title, _ in FIELDS.values())
    found = parse_print_fields(
        text,
        lambda name: FIELDS.get(name.lower()),
        lambda spec: spec[1],
        unknown=lambda name: f'Invalid field requested: "{name}" (HAL\'s sshare knows: {known})',
    )
    if not found:
        raise ValueError("-o needs fields, e.g. -o Account,User,RawUsage,FairShare")
    return [(title, width) for (title, _), width in found]


class ShareClient(Protocol):
    def shares(
        self,
        *,
        users: list[str] | None = None,
        accounts: list[str] | None = None,
        validate: bool = True,
    ) -> ShareList: ...


def _level_fs(value: float | None) -> str:
    if value is None:
        return ""
    return "inf" if value >= LEVEL_FS_INFINITE else f"{value:.6f}"


def _tres(minutes: dict[str, int]) -> str:
    """``cpu=120,mem=245760,node=1,billing=120,gres/gpu=0`` (empty: the server did not say)."""
    if not minutes:
        return ""
    names = [n for n in TRES_ORDER if n in minutes] + sorted(set(minutes) - set(TRES_ORDER))
    return ",".join(f"{name}={minutes[name]}" for name in names)


def _values(row: ShareInfo) -> dict[str, str]:
    root = row.depth == 0
    # fair tree (rows below root carry a Level FS): only users have a factor
    no_factor = root or (row.level_fs is not None and not row.user)
    return {
        "Account": " " * row.depth + row.account,
        "User": row.user,
        "RawShares": "" if root else str(row.raw_shares),
        "NormShares": f"{row.norm_shares:.6f}",
        "RawUsage": str(round(row.raw_usage)),
        "NormUsage": f"{row.norm_usage:.6f}",
        "EffectvUsage": f"{row.effective_usage:.6f}",
        "FairShare": "" if no_factor else f"{row.fairshare:.6f}",
        "LevelFS": "" if root else _level_fs(row.level_fs),
        "GrpTRESMins": "",  # HAL has no TRES-minutes limits
        "TRESRunMins": _tres(row.tres_run_minutes),
    }


def sshare_lines(
    rows: list[ShareInfo], columns: list[Column], *, header: bool, parsable: str
) -> list[str]:
    """The table, or parsable lines (``parsable``: ``formats.parsable_mode``)."""
    values = []
    for row in rows:
        shown = _values(row)
        if parsable:
            shown["Account"] = row.account  # as is, not indented as the table's
        values.append([shown[title] for title, _ in columns])
    # titles aligned as their values (Account to the left) and a blank after every
    # column, as Slurm 22.05.8's sshare prints them
    return print_fields(
        columns,
        values,
        header=header,
        parsable=parsable,
        titles_as_values=True,
        trailing_blank=True,
    )


def _help_format() -> list[str]:
    """``-e``: the ``-o`` field names, five to a line."""
    titles = sorted(title for title, _ in FIELDS.values())
    return [
        " ".join(t.ljust(13) for t in titles[i : i + 5]).rstrip() for i in range(0, len(titles), 5)
    ]


def sshare(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sshare"))
    opts = {dest: value for dest, value, _ in parsed.values}
    if {"help", "usage", "version"} & opts.keys():
        console.out(
            "Usage: sshare [-a] [-l] [-n] [-p|-P] [-U] [-u users] [-A accounts] [-o fields] [-e]"
        )
        return 0
    if "helpformat" in opts:
        for line in _help_format():
            console.out(line)
        return 0
    if parsed.positionals:
        return console.error(f"Unrecognized option: {parsed.positionals[0]}")
    try:
        columns = (
            parse_fields(opts["format"] or "")
            if "format" in opts
            else LONG_COLUMNS
            if "long" in opts
            else COLUMNS
        )
    except ValueError as err:
        return console.error(str(err))
    users = [u for u in (opts.get("users") or "").split(",") if u] or None
    accounts = [a for a in (opts.get("accounts") or "").split(",") if a] or None
    client = cast(ShareClient, console.client)
    try:
        if users is None and "all" not in opts:
            users = [console.current_user()]
        found = client.shares(users=users, accounts=accounts, validate=False)
    except HalError as err:
        return console.error(err.message)
    rows = found.rows
    if "users_only" in opts:  # -U: the user associations, without the accounts above them
        rows = [row for row in rows if row.user]
    parsable = parsable_mode(opts)
    for line in sshare_lines(rows, columns, header="noheader" not in opts, parsable=parsable):
        console.out(line)
    return 0
