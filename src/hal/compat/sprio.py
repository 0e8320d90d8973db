"""The ``sprio`` command (also ``hal prio``): pending jobs' multifactor priority factors.

Columns as Slurm 22.05.8 prints them (checked, docs/slurm-checks.md): the default layout
has ``JOBID PARTITION PRIORITY SITE`` and then only the factors whose weight is not 0
(HAL's ``[priority]`` weights, sent with the jobs); ``-u`` adds USER; ``-l`` prints every
factor, ASSOC, NICE and TRES whatever the weights. Weighted factors are rounded to
integers; normalised ones (``-n``) have seven decimals, and ``-n`` has no SITE column. The
normalised priority (``%y``) is the weighted factors' sum less the nice, at least 1, over
2^32-1 with 14 decimals (``-n`` cuts it to its 10 characters), and an administrator's
priority as it is (``4242.00000``). ``-w`` prints the weights in the same columns.
Formats (``-o``) use sprio's letters: ``%i`` job, ``%r`` partition, ``%u`` user, ``%Y``
priority, ``%S`` site, ``%A`` age, ``%B`` association, ``%F`` fair share, ``%J`` job size,
``%P`` partition, ``%Q`` QOS, ``%N`` nice, ``%T`` TRES, ``%c`` cluster; lower case gives
the normalised value. HAL has no association or TRES factors (no PriorityWeightAssoc or
PriorityWeightTRES): ``%B`` prints 0 and ``%T`` nothing (its weight ``(null)``), as Slurm
does with those weights unset; ``%c`` is ``(null)``, as outside a federation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from hal.client.records import Record, replaced
from hal.compat.formats import Field, parse_format, render_rows
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError

if TYPE_CHECKING:
    from hal.wire.priority import JobPriorityInfo, PriorityList, PriorityWeightsInfo

# Slurm 22.05.8's sprio (its binary's strings): -l and -n -l print every column
LONG_FORMAT = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
NORMALIZED_LONG_FORMAT = "%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t"

TITLES = {
    "i": "JOBID",
    "r": "PARTITION",
    "u": "USER",
    "c": "CLUSTER",
    "Y": "PRIORITY",
    "y": "PRIORITY",
    "S": "SITE",
    "A": "AGE",
    "a": "AGE",
    "B": "ASSOC",
    "b": "ASSOC",
    "F": "FAIRSHARE",
    "f": "FAIRSHARE",
    "J": "JOBSIZE",
    "j": "JOBSIZE",
    "P": "PARTITION",
    "p": "PARTITION",
    "Q": "QOS",
    "q": "QOS",
    "N": "NICE",
    "T": "TRES",
    "t": "TRES",
}
PRIORITY_SCALE = float(0xFFFFFFFF)  # %y: the priority as a fraction of its range
NULL = "(null)"  # what Slurm prints for %c outside a federation and for unset TRES weights
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")  # 123 or an array element 123_4

OPTIONS = (
    Opt("noheader", ("noheader",), "h", Arg.NONE),
    Opt("jobs", ("jobs",), "j", Arg.OPTIONAL),
    Opt("users", ("user", "users"), "u"),
    Opt("partition", ("partition",), "p"),
    Opt("format", ("format",), "o"),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("norm", ("norm",), "n", Arg.NONE),
    Opt("weights", ("weights",), "w", Arg.NONE),
    Opt("clusters", ("clusters",), "M"),
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)


class PriorityClient(Protocol):
    def priorities(
        self,
        *,
        users: list[str] | None = None,
        ids: list[str] | None = None,
        partitions: list[str] | None = None,
        validate: bool = True,
    ) -> PriorityList: ...

    def whoami(self) -> object: ...


def _whole(value: float) -> str:
    return str(round(value))


def _norm(value: float) -> str:
    return f"{value:.7f}"


def _norm_priority(job: JobPriorityInfo) -> str:
    """``%y``: an administrator's priority as it is, else the weighted sum less the nice
    (at least 1, as the priority) over 2^32-1, unrounded, as Slurm 22.05.8 prints it."""
    if job.fixed:
        return f"{float(job.priority):.14f}"
    w = job.weighted
    total = w.site + w.age + w.fairshare + w.job_size + w.partition + w.qos - job.nice
    return f"{max(total, 1.0) / PRIORITY_SCALE:.14f}"


JobColumn = Callable[["JobPriorityInfo"], str]
LETTERS: dict[str, JobColumn] = {
    "i": lambda j: j.display_id,
    "r": lambda j: j.partition,
    "u": lambda j: j.user,
    "c": lambda _j: NULL,
    "Y": lambda j: str(j.priority),
    "y": _norm_priority,
    "S": lambda j: _whole(j.weighted.site),
    "A": lambda j: _whole(j.weighted.age),
    "a": lambda j: _norm(j.normalized.age),
    "B": lambda _j: "0",
    "b": lambda _j: _norm(0.0),
    "F": lambda j: _whole(j.weighted.fairshare),
    "f": lambda j: _norm(j.normalized.fairshare),
    "J": lambda j: _whole(j.weighted.job_size),
    "j": lambda j: _norm(j.normalized.job_size),
    "P": lambda j: _whole(j.weighted.partition),
    "p": lambda j: _norm(j.normalized.partition),
    "Q": lambda j: _whole(j.weighted.qos),
    "q": lambda j: _norm(j.normalized.qos),
    "N": lambda j: str(j.nice),
    "T": lambda _j: "",
    "t": lambda _j: "",
}


def default_format(weights: PriorityWeightsInfo, *, normalized: bool, user: bool) -> str:
    """sprio's layout without ``-l`` or ``-o``: Slurm 22.05.8 builds it from the weights,
    a column for each factor whose weight is not 0, in this order (A B F J P Q T; HAL
    has no association or TRES weight), after SITE (weighted only) and USER (with ``-u``)."""
    factors = (
        ("A", weights.age),
        ("F", weights.fairshare),
        ("J", weights.job_size),
        ("P", weights.partition),
        ("Q", weights.qos),
    )
    parts = ["%.15i", "%9r"] + (["%.8u"] if user else [])
    if normalized:
        parts.append("%10y")
        parts += [f"%10{letter.lower()}" for letter, weight in factors if weight]
    else:
        parts += ["%.10Y", "%.10S"]
        parts += [f"%.10{letter}" for letter, weight in factors if weight]
    return " ".join(parts)


def _as_listed(job: JobPriorityInfo) -> JobPriorityInfo:
    """``job`` as sprio lists it: a priority an administrator set (``fixed``) with every
    factor and the nice 0, as Slurm 22.05.8 prints it (docs/slurm-checks.md); REST keeps
    the factors the job would have had."""
    if not job.fixed:
        return job
    zero = Record(**dict.fromkeys(vars(job.weighted), 0.0))  # every factor the server sent
    return replaced(job, {"weighted": zero, "normalized": zero, "nice": 0})


def _weights_row(w: PriorityWeightsInfo) -> dict[str, str]:
    """``sprio -w``: the weights, under the factor columns they multiply (in either case
    of the letter); the priority, nice, user and partition blank, TRES ``(null)`` as
    Slurm's with no PriorityWeightTRES."""
    row = {"i": "Weights", "S": "1", "B": "0", "b": "0", "T": NULL}
    for upper, value in (
        ("A", w.age),
        ("F", w.fairshare),
        ("J", w.job_size),
        ("P", w.partition),
        ("Q", w.qos),
    ):
        row[upper] = row[upper.lower()] = str(value)
    return row


def sprio(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sprio"))
    opts = {dest: value for dest, value, _ in parsed.values}
    if {"help", "usage", "version"} & opts.keys():
        console.out("Usage: sprio [-h] [-l] [-n] [-w] [-j jobs] [-u users] [-p parts] [-o fmt]")
        return 0
    positionals = list(parsed.positionals)
    if "jobs" in opts and not opts["jobs"] and positionals:
        opts["jobs"] = positionals.pop(0)  # `sprio -j 12` (the value not glued), as squeue
    if positionals:
        return console.error(f"Unrecognized option: {positionals[0]}")
    for job_id in (opts.get("jobs") or "").split(","):
        if job_id and not _JOB_ID.match(job_id):  # sprio's own check, before any request
            return console.error(f"Invalid job id: {job_id}; write 123 or 123_4, comma-separated")
    fmt: str | None = None  # None: the default layouts, which depend on the weights
    if "format" in opts:
        fmt = opts["format"] or ""
        if not fmt.strip():
            return console.error(
                "Format option lacks specification: -o needs fields, e.g. -o '%i %u %Y'"
            )
    elif "long" in opts:
        fmt = NORMALIZED_LONG_FORMAT if "norm" in opts else LONG_FORMAT
    if fmt is not None:
        for part in parse_format(fmt):
            if isinstance(part, Field) and part.letter not in LETTERS:
                return console.error(f"Invalid job format specification: {part.letter}")

    def split(key: str) -> list[str] | None:
        text = opts.get(key)
        return [t for t in text.split(",") if t] if text else None

    # the commands' seam names the client methods most commands use; sprio's own is here
    client = cast(PriorityClient, console.client)
    try:
        found = client.priorities(
            users=split("users"), ids=split("jobs"), partitions=split("partition"), validate=False
        )
    except HalError as err:
        return console.error(err.message)
    if fmt is None:
        fmt = default_format(found.weights, normalized="norm" in opts, user="users" in opts)
    layout = parse_format(fmt)
    letters = {p.letter for p in layout if isinstance(p, Field)}
    titles = {letter: TITLES[letter] for letter in letters}
    if "weights" in opts:
        rows = [_weights_row(found.weights)]
    elif not found.jobs and opts.get("jobs"):
        # Slurm's words, on stdout, also with -h (checked with 22.05.8)
        console.out("Unable to find jobs matching user/id(s) specified")
        return 0
    else:
        listed = sorted(found.jobs, key=lambda j: j.job_id)  # Slurm's default sort: by id
        rows = [{letter: LETTERS[letter](_as_listed(j)) for letter in letters} for j in listed]
    for line in render_rows(layout, titles, rows, header="noheader" not in opts):
        console.out(line)
    return 0
