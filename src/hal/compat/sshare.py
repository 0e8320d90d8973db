"""The ``sshare`` command: the fair-share tree, Slurm 22.05's classic layout.

Accounts are indented one space per level; without ``-a`` only the caller's own user
associations are listed (with every account), ``-u`` picks users, ``-A`` an account's
subtree. ``-l`` adds ``NormUsage`` and ``LevelFS``; ``-P``/``-p`` print ``|``-separated
values; ``-n`` drops the header. ``RawUsage`` is decayed billing-seconds (CPU-seconds plus
weighted GPU-seconds), as an integer.

``FairShare`` is the factor of the server's algorithm (``[priority]
fairshare_algorithm``). With fair tree, ``NormShares`` and ``EffectvUsage`` are relative
to the siblings, accounts have no ``FairShare`` (empty) and ``LevelFS`` is S / U (``inf``
for an association that used nothing); with classic ``LevelFS`` is empty, as in Slurm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError

if TYPE_CHECKING:
    from hal.wire.priority import ShareInfo, ShareList

OPTIONS = (
    Opt("all", ("all",), "a", Arg.NONE),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("users", ("users", "user"), "u"),
    Opt("accounts", ("accounts", "account"), "A"),
    Opt("noheader", ("noheader",), "n", Arg.NONE),
    Opt("parsable", ("parsable",), "p", Arg.NONE),
    Opt("parsable2", ("parsable2",), "P", Arg.NONE),
    Opt("clusters", ("clusters",), "M"),
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)

# (title, width, right-aligned value)
COLUMNS = (
    ("Account", 20, False),
    ("User", 10, True),
    ("RawShares", 10, True),
    ("NormShares", 11, True),
    ("RawUsage", 11, True),
    ("EffectvUsage", 13, True),
    ("FairShare", 10, True),
)
LONG_COLUMNS = (*COLUMNS[:5], ("NormUsage", 11, True), *COLUMNS[5:], ("LevelFS", 10, True))


class ShareClient(Protocol):
    def shares(
        self, *, users: list[str] | None = None, accounts: list[str] | None = None
    ) -> ShareList: ...


def _level_fs(value: float | None) -> str:
    if value is None:
        return ""
    from hal.wire.priority import LEVEL_FS_INFINITE  # loaded already: the rows are its

    return "inf" if value >= LEVEL_FS_INFINITE else f"{value:.6f}"


def _values(row: ShareInfo, long: bool) -> dict[str, str]:
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
    }


def sshare_lines(rows: list[ShareInfo], *, long: bool, header: bool, sep: str | None) -> list[str]:
    """The table (``sep`` None) or parsable lines (``sep`` "|" or "|" with a trailing one)."""
    columns = LONG_COLUMNS if long else COLUMNS
    lines: list[str] = []
    if sep is not None:
        trail = sep == "|+"
        if header:
            lines.append("|".join(c[0] for c in columns) + ("|" if trail else ""))
        for row in rows:
            values = _values(row, long)
            values["Account"] = row.account
            lines.append("|".join(values[c[0]] for c in columns) + ("|" if trail else ""))
        return lines
    if header:
        lines.append(" ".join(title.rjust(width) for title, width, _ in columns))
        lines.append(" ".join("-" * width for _, width, _ in columns))
    for row in rows:
        values = _values(row, long)
        cells = []
        for title, width, right in columns:
            text = values[title][:width]
            cells.append(text.rjust(width) if right else text.ljust(width))
        lines.append(" ".join(cells).rstrip())
    return lines


def sshare(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sshare"))
    opts = {dest: value for dest, value, _ in parsed.values}
    if {"help", "usage", "version"} & opts.keys():
        console.out("Usage: sshare [-a] [-l] [-n] [-P] [-u users] [-A accounts]")
        return 0
    if parsed.positionals:
        return console.error(f"Unrecognized option: {parsed.positionals[0]}")
    users = [u for u in (opts.get("users") or "").split(",") if u] or None
    accounts = [a for a in (opts.get("accounts") or "").split(",") if a] or None
    client = cast(ShareClient, console.client)
    try:
        if users is None and "all" not in opts:
            users = [console.current_user()]
        found = client.shares(users=users, accounts=accounts)
    except HalError as err:
        return console.error(err.message)
    sep = "|+" if "parsable" in opts else "|" if "parsable2" in opts else None
    for line in sshare_lines(
        found.rows, long="long" in opts, header="noheader" not in opts, sep=sep
    ):
        console.out(line)
    return 0
