"""The ``sprio`` command (also ``hal prio``): pending jobs' multifactor priority factors.

Columns as Slurm 22.05 prints them: weighted factors are rounded to integers, normalised
ones (``-n``) have seven decimals; ``-w`` prints the weights in the same columns.
Formats (``-o``) use sprio's letters: ``%i`` job, ``%r`` partition, ``%u`` user, ``%Y``
priority, ``%S`` site, ``%A`` age, ``%F`` fair share, ``%J`` job size, ``%P`` partition,
``%Q`` QOS, ``%N`` nice; lower case gives the normalised value. HAL has no association or
TRES factors: ``%B`` and ``%T`` print 0 and empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from hal.compat.formats import Field, parse_format, render_rows
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError
from hal.wire.priority import FactorValues

if TYPE_CHECKING:
    from hal.wire.priority import JobPriorityInfo, PriorityList, PriorityWeightsInfo

DEFAULT_FORMAT = "%.15i %9r %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q %.6N"
LONG_FORMAT = "%.15i %9r %.8u %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q %.6N"
NORMALIZED_FORMAT = "%.15i %9r %.10y %.10S %.10a %.10f %.10j %.10p %.10q %.6N"
NORMALIZED_LONG_FORMAT = "%.15i %9r %.8u %.10y %.10S %.10a %.10f %.10j %.10p %.10q %.6N"

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
    ) -> PriorityList: ...

    def whoami(self) -> object: ...


def _whole(value: float) -> str:
    return str(round(value))


def _norm(value: float) -> str:
    return f"{value:.7f}"


JobColumn = Callable[["JobPriorityInfo", str], str]
LETTERS: dict[str, JobColumn] = {
    "i": lambda j, _c: j.display_id,
    "r": lambda j, _c: j.partition,
    "u": lambda j, _c: j.user,
    "c": lambda _j, c: c,
    "Y": lambda j, _c: str(j.priority),
    "y": lambda j, _c: _norm(j.priority / PRIORITY_SCALE),
    "S": lambda j, _c: _whole(j.weighted.site),
    "A": lambda j, _c: _whole(j.weighted.age),
    "a": lambda j, _c: _norm(j.normalized.age),
    "B": lambda _j, _c: "0",
    "b": lambda _j, _c: _norm(0.0),
    "F": lambda j, _c: _whole(j.weighted.fairshare),
    "f": lambda j, _c: _norm(j.normalized.fairshare),
    "J": lambda j, _c: _whole(j.weighted.job_size),
    "j": lambda j, _c: _norm(j.normalized.job_size),
    "P": lambda j, _c: _whole(j.weighted.partition),
    "p": lambda j, _c: _norm(j.normalized.partition),
    "Q": lambda j, _c: _whole(j.weighted.qos),
    "q": lambda j, _c: _norm(j.normalized.qos),
    "N": lambda j, _c: str(j.nice),
    "T": lambda _j, _c: "",
    "t": lambda _j, _c: "",
}


def _as_listed(job: JobPriorityInfo) -> JobPriorityInfo:
    """``job`` as sprio lists it: a priority an administrator set (``fixed``) with every
    factor and the nice 0, as Slurm 22.05.8 prints it (docs/slurm-checks.md); REST keeps
    the factors the job would have had."""
    if not job.fixed:
        return job
    zero = FactorValues()
    return job.model_copy(update={"weighted": zero, "normalized": zero, "nice": 0})


def _weights_row(w: PriorityWeightsInfo) -> dict[str, str]:
    """``sprio -w``: the weights, under the factor columns they multiply."""
    row = {"i": "Weights", "S": "1", "B": "0", "b": "0"}
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
    if "format" in opts:
        fmt = opts["format"] or ""
        if not fmt.strip():
            return console.error(
                "Format option lacks specification: -o needs fields, e.g. -o '%i %u %Y'"
            )
    elif "norm" in opts:
        fmt = NORMALIZED_LONG_FORMAT if "long" in opts else NORMALIZED_FORMAT
    else:
        fmt = LONG_FORMAT if "long" in opts else DEFAULT_FORMAT
    layout = parse_format(fmt)
    for part in layout:
        if isinstance(part, Field) and part.letter not in LETTERS:
            return console.error(f"Invalid job format specification: {part.letter}")

    def split(key: str) -> list[str] | None:
        text = opts.get(key)
        return [t for t in text.split(",") if t] if text else None

    # the commands' seam names the client methods most commands use; sprio's own is here
    client = cast(PriorityClient, console.client)
    try:
        found = client.priorities(
            users=split("users"), ids=split("jobs"), partitions=split("partition")
        )
    except HalError as err:
        return console.error(err.message)
    cluster = console.environ.get("SLURM_CLUSTER_NAME", "hal")
    letters = {p.letter for p in layout if isinstance(p, Field)}
    titles = {letter: TITLES[letter] for letter in letters}
    if "weights" in opts:
        rows = [_weights_row(found.weights)]
    elif not found.jobs and opts.get("jobs"):
        # Slurm's words, on stdout, also with -h (checked with 22.05.8)
        console.out("Unable to find jobs matching user/id(s) specified")
        return 0
    else:
        rows = [
            {letter: LETTERS[letter](listed, cluster) for letter in letters}
            for listed in map(_as_listed, found.jobs)
        ]
    for line in render_rows(layout, titles, rows, header="noheader" not in opts):
        console.out(line)
    return 0
