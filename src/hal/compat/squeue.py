"""The ``squeue`` command.

What tools parse, pinned by tests: Parsl's ``squeue --noheader --format='%i %t' --job ids``
(``--job`` is getopt's abbreviation of ``--jobs``), Nextflow's
``squeue --noheader -o '%i %t' -t all -p q -u user``, PSI/J's
``squeue -O JobArrayID,StateCompact,Reason -t all --me`` and Snakemake's
``squeue --format=%i|%T --states=all --noheader --name X``.

Without ``-t``, pending, running, suspended and completing jobs are shown; with ``-j`` and
no ``-t``, jobs in any state that the server still lists (finished within MinJobAge).
Pending elements of an array fold into one line (``4_[1-3%2]``) unless ``-r``.
``-w node[1-3]`` shows only jobs allocated to one of those nodes; ``-R NAME``
(``--reservation``) only jobs of that reservation (an unknown name: none, rc 0, as Slurm).
``-i N`` reprints the report every N seconds (a date line first, a blank line after) until
interrupted. ``-s``/``--steps[=LIST]`` lists running job steps instead (``squeue_steps``).
"""

from __future__ import annotations

import time

from hal.client.records import JOB_DEFAULTS
from hal.compat.formats import (
    Field,
    parse_format,
    parse_long_names,
    render_columns,
    timestamps,
)
from hal.compat.job_fields import (
    JOB_LETTERS,
    LETTER_FIELDS,
    LONG_FIELD_WIDTH,
    LONG_FIELDS,
    PLAIN_LETTERS,
    TIME_LETTERS,
    time_used,
)
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Client, Console
from hal.compat.user_names import resolve_user
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError, NotFound
from hal.slurm.syntax import compress_indices, expand_hostlist

# squeue's start-up is a workflow tool's cost per poll (see ``hal.compat``): the jobs come
# as records (``HalClient.jobs(validate=False)``; a long list as msgspec's structs of the
# same attributes, ``records.job_list``), not pydantic ``JobInfo``s, and --json's
# module is imported where it is asked for, as the state names where -t needs them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from hal.wire.jobs import JobInfo

    T = TypeVar("T")

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
DEFAULT_SORT = "P,t,-p"
# -o %all (exactly that): every letter, a to z then A to Z, between bars, as Slurm's squeue
# (the letters written out: the ``string`` module is a millisecond of squeue's start-up)
ALL_FORMAT = "|".join(
    f"%{letter}" for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

DEFAULT_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING"})  # JobState's
INVALID_JOB_ID = "slurm_load_jobs error: Invalid job id specified"

OPTIONS = (
    Opt("noheader", ("noheader",), "h", Arg.NONE),
    Opt("states", ("states",), "t"),
    Opt("user", ("user",), "u"),
    Opt("me", ("me",), arg=Arg.NONE),
    Opt("jobs", ("jobs",), "j", Arg.OPTIONAL),
    Opt("partition", ("partition",), "p"),
    Opt("name", ("name",), "n"),
    Opt("account", ("account",), "A"),
    Opt("qos", ("qos",), "q"),
    Opt("nodelist", ("nodelist",), "w"),
    Opt("reservation", ("reservation",), "R"),
    Opt("array", ("array",), "r", Arg.NONE),
    Opt("start", ("start",), arg=Arg.NONE),
    Opt("json", ("json",), arg=Arg.NONE),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("format", ("format",), "o"),
    Opt("Format", ("Format",), "O"),
    Opt("sort", ("sort",), "S"),
    Opt("iterate", ("iterate",), "i"),
    Opt("all", ("all",), "a", Arg.NONE),  # hidden partitions: HAL has none
    Opt("clusters", ("clusters",), "M"),  # HAL is one cluster; any value selects it
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
    Opt("steps", ("steps",), "s", Arg.OPTIONAL),
)


class Query:
    """What squeue was asked: filters, layout and mode (a plain class, as every type on
    squeue's start-up; see ``hal.compat``)."""

    def __init__(self, *, version: bool = False) -> None:
        self.noheader = False
        self.states: set[str] | None = None  # JobState names or other Slurm names; None = default
        self.users: list[str] = []
        self.me = False
        self.ids: list[str] = []
        self.partitions: list[str] = []
        self.names: list[str] = []
        self.accounts: list[str] = []
        self.qos: list[str] = []
        self.nodes: set[str] = set()  # -w: jobs on any of these nodes
        self.reservations: list[str] = []  # -R
        self.unfold = False
        self.json = False
        self.long = False
        self.layout: list[Field | str] = parse_format(DEFAULT_FORMAT)
        self.sort = DEFAULT_SORT
        self.iterate = 0  # -i: seconds between reports; 0 reports once
        self.steps: list[str] | None = None  # -s: list steps (these JOB.N, or all when empty)
        self.version = version  # -V: print the version line alone
        # -O names squeue does not know, as written: each said on stderr, as Slurm's, and
        # dropped
        self.unknown: list[str] = []


class UsageError(Exception):
    pass


def squeue(argv: list[str], console: Console) -> int:
    try:
        query = parse_query(argv)
    except UsageError as err:
        return console.error(str(err))
    except OptionError as err:
        return console.error(err.for_command("squeue"))
    if query is None:
        console.out("Usage: squeue [-h] [-l] [-r] [-t states] [-u users] [--me] [-j ids] ...")
        return 0
    if query.version:
        console.out(VERSION_LINE)
        return 0
    for name in query.unknown:  # Slurm 22.05.8 says so and goes on, exit code 0
        console.err(f"squeue: error: Invalid job format specification: {name}")
    try:
        if not _check_query(query, console):
            return 1
    except HalError as err:
        return console.error(err.message)
    while True:
        try:
            rc = _show(query, console)
        except HalError as err:
            return console.error(err.message)
        if not query.iterate or rc != 0:
            return rc
        console.out("")  # squeue --iterate: a blank line between reports
        console.stdout.flush()
        console.sleep(query.iterate)


def parse_query(argv: list[str]) -> Query | None:
    parsed = parse_options(argv, OPTIONS)
    query = Query()
    jobs_flag = False
    fmt: str | None = None
    given: set[str] = set()  # of -o and -O, which came
    for dest, value, _ in parsed.values:
        text = value or ""
        if dest in ("help", "usage"):
            return None
        if dest == "version":
            return Query(version=True)  # (as Slurm's getopt loop: at once, nothing else read)
        if dest == "noheader":
            query.noheader = True
        elif dest == "states":
            query.states = parse_states(text)
        elif dest == "user":
            query.users += _list(text)
        elif dest == "me":
            query.me = True
        elif dest == "jobs":
            jobs_flag = True
            query.ids += parse_job_ids(text) if value else []
        elif dest == "partition":
            query.partitions += _list(text)
        elif dest == "name":
            query.names += _list(text)
        elif dest == "account":
            query.accounts += _list(text)
        elif dest == "qos":
            query.qos += _list(text)
        elif dest == "nodelist":
            query.nodes |= set(expand_hostlist(text, field="nodelist"))
        elif dest == "reservation":
            query.reservations += _list(text)
        elif dest == "array":
            query.unfold = True
        elif dest == "start":
            fmt, query.sort = START_FORMAT, "S"
            query.states = query.states or {"PENDING"}
        elif dest == "json":
            query.json = True
        elif dest == "long":
            query.long = True
            fmt = LONG_FORMAT if fmt is None else fmt
        elif dest == "format":
            _one_format(given, dest)
            # an empty one has no columns: an empty line for the title and each job,
            # rc 0, as Slurm 22.05.8 prints it (HAL refused it as a likely mistake)
            fmt = ALL_FORMAT if text == "%all" else text
        elif dest == "Format":
            _one_format(given, dest)
            query.unknown = []  # (the last -O is the one shown)
            query.layout = parse_long_names(
                text, LONG_FIELDS, LONG_FIELD_WIDTH, unknown=query.unknown
            )
            fmt = None
        elif dest == "sort":
            query.sort = text
        elif dest == "iterate":
            query.iterate = _iterate(text)
        elif dest == "steps":
            query.steps = _list(text)
    positionals = list(parsed.positionals)
    if jobs_flag and positionals and not query.ids:
        query.ids = parse_job_ids(positionals.pop(0))  # `squeue -j 12` (value not glued)
    if positionals:
        raise UsageError(f"Unrecognized option: {positionals[0]}")
    if query.steps is not None:
        return _step_query(query, fmt)
    if fmt is not None:
        query.layout = parse_format(fmt)
    for part in query.layout:
        if isinstance(part, Field) and part.letter not in JOB_LETTERS:
            raise UsageError(
                f"Invalid job format specification: {part.letter} "
                f"(HAL does not support %{part.letter})"
            )
    sort_keys(query.sort)
    return query


def _step_query(query: Query, fmt: str | None) -> Query:
    from hal.compat.squeue_steps import STEP_FORMAT, STEP_LETTERS

    query.layout = parse_format(STEP_FORMAT if fmt is None else fmt)
    query.unknown = []  # -O's, unused: HAL lists steps in -o's fields only
    for part in query.layout:
        if isinstance(part, Field) and part.letter not in STEP_LETTERS:
            raise UsageError(
                f"Invalid job step format specification: {part.letter} (HAL's squeue -s "
                f"knows %{', %'.join(STEP_LETTERS)})"
            )
    import re  # (only for -s: squeue's start-up has no re, see hal.slurm.syntax)

    for item in query.steps or ():
        if not re.fullmatch(r"\d+(_\d+)?\.\d+", item):
            raise UsageError(f"Invalid job step id: {item} (write JOB.STEP, e.g. 12.0)")
    return query


def _one_format(given: set[str], dest: str) -> None:
    """``-o`` and ``-O`` both: refused, as Slurm's squeue, naming the one given second."""
    given.add(dest)
    if given == {"format", "Format"}:
        if dest == "Format":
            raise UsageError("-O (--Format) is incompatible with -o (--format)")
        raise UsageError("-o (--format) is incompatible with -O (--Format)")


def _iterate(text: str) -> int:
    """``-i SECONDS``: a positive whole number, as squeue's ``--iterate``."""
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(
            f"--iterate={text}: give the seconds between reports as a positive integer (-i 5)"
        )
    return int(text)


# The -S letters Slurm 22.05.8's squeue sorts jobs by (each letter tried against it); it
# refuses every other letter, and says so of ``b`` but goes on without it
SORT_LETTERS = frozenset("cdefghijlmnptuvzBCDGHIJLMNOPQSTUV")
_IGNORED_SORT_LETTERS = frozenset("b")


def sort_keys(spec: str) -> list[tuple[str, bool]]:
    """``--sort`` as (letter, descending) pairs, read as Slurm's squeue reads it: letter
    by letter, commas and signs between (``-l,i``; ``il`` is ``i,l``), a ``-`` reversing
    the letter after it; ``cluster`` (HAL is one) sorts nothing. Refused, before any job is
    read (an empty queue must not hide the mistake): a letter it does not sort by."""
    keys: list[tuple[str, bool]] = []
    for item in _list(spec):
        if item.lstrip("+-") == "cluster":
            continue
        for index, letter in enumerate(item):
            if letter in "+-":
                continue
            if letter not in SORT_LETTERS and letter not in _IGNORED_SORT_LETTERS:
                raise UsageError(
                    f"Invalid sort specification: {letter} (sort by "
                    f"{', '.join(sorted(SORT_LETTERS))}, e.g. --sort=-p,i or --sort=t,-S)"
                )
            keys.append((letter, index > 0 and item[index - 1] == "-"))
    return keys


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_states(text: str) -> set[str] | None:
    """``-t``: codes or names, any case, comma-separated; ``all`` is every state."""
    # (the names as plain strings: JobState's enum is start-up time, see state_names)
    from hal.core.state_names import JOB_STATE_CODES, JOB_STATES_BY_CODE, OTHER_SLURM_STATES

    states: set[str] = set()
    for item in _list(text):
        upper = item.upper()
        if upper == "ALL":
            return set(JOB_STATE_CODES)
        if upper in JOB_STATES_BY_CODE:
            states.add(JOB_STATES_BY_CODE[upper])
        elif upper in JOB_STATE_CODES or upper in OTHER_SLURM_STATES:
            states.add(upper)
        else:
            raise UsageError(f"Invalid job state specified: {item}")
    return states


def parse_job_ids(text: str) -> list[str]:
    ids = _list(text)
    for item in ids:
        if not _is_job_id(item):
            raise UsageError(f"Invalid job id: {item}")
    return ids


def _is_job_id(text: str) -> bool:
    r"""123, 123_4 (an array element), 123+1 (a het component): ``re.match`` of
    ``^\d+([_+]\d+)?$``, one final newline allowed as ``$`` allows it."""
    body = text.removesuffix("\n")
    head, sep, tail = body.replace("+", "_").partition("_")
    return head.isdecimal() and (not sep or tail.isdecimal())


# -- showing ------------------------------------------------------------------------------


def _check_query(query: Query, console: Console) -> bool:
    """What squeue checks against the cluster once, before its first report, as Slurm's:
    a ``-w`` node it does not have ends it (``Invalid node name``, exit 1); a ``-u`` user
    it does not know is said and left out (the report goes on, exit 0); a ``-S b`` is
    said and not sorted by."""
    if query.nodes:
        known = {node.name for node in console.client.nodes()}
        missing = sorted(query.nodes - known)
        if missing:
            console.error(f"Invalid node name {missing[0]}")
            return False
    users = []
    for text in query.users:
        name = resolve_user(console.client, text)
        if name is None:
            console.error(f"Invalid user: {text}")
        users.append(name or text)  # (an unknown name matches no job)
    query.users = users
    for letter, _ in sort_keys(query.sort):
        if letter in _IGNORED_SORT_LETTERS:
            console.err(f"squeue: Invalid sort specification: {letter}")
    return True


def _show(query: Query, console: Console) -> int:
    """One report, the cyclic garbage collector paused meanwhile: a queue's 100,000
    records hold no cycle, and its passes over them as they are made were a sixth of
    their parse."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        return _report(query, console)
    finally:
        if collecting:
            gc.enable()


def _report(query: Query, console: Console) -> int:
    client = console.client
    if query.me:  # once: -i runs this again
        query.users.append(console.current_user())
        query.me = False
    if query.steps is not None:
        return _show_steps(query, console)
    if query.ids:
        # Ask only by id, then filter here: an id that exists but is filtered away (a job
        # that has ended, without -t) prints nothing, while an id that does not exist is
        # an error, as Slurm's; an element an existing array does not have is no error.
        jobs = _by_ids(client, query.ids, query_fields(query))
        if not jobs and len(query.ids) == 1:
            (item,) = query.ids
            if "_" not in item or not _by_ids(client, [item.split("_")[0]], ["id"]):
                console.err(INVALID_JOB_ID)
                return 1
    else:
        finished = query.json or (  # (--json: every job the server still lists, as Slurm's)
            query.states is not None and _any_ended(query.states)
        )
        jobs = client.jobs(
            states=_server_states(query.states),
            users=query.users or None,
            partitions=query.partitions or None,
            names=query.names or None,
            include_finished=finished,
            validate=False,
            fields=query_fields(query),
        )
    wanted = _wanted(query)
    jobs = [job for job in jobs if wanted(job)]
    if not query.unfold:
        jobs = fold_arrays(jobs)
    now = console.clock()
    jobs = sort_jobs(jobs, query.sort, now)
    if query.json:
        import json

        from hal.compat.squeue_json import jobs_json

        console.out(json.dumps(jobs_json(jobs, now), indent=2))
        return 0
    if (query.long or query.iterate) and not query.noheader:
        console.out(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    lines = job_lines(query.layout, jobs, now, header=not query.noheader)
    if lines:  # (one write: a queue's 100,000 lines are 100,000 writes one by one)
        console.out("\n".join(lines))
    return 0


def _any_ended(states: set[str]) -> bool:
    from hal.core.state_names import TERMINAL_JOB_STATES

    return not TERMINAL_JOB_STATES.isdisjoint(states)


def _show_steps(query: Query, console: Console) -> int:
    from hal.compat.squeue_steps import running_steps, step_lines

    found = [
        (step, job)
        for step, job in running_steps(console)
        if (not query.steps or f"{job.display_id}.{step.step_id}" in query.steps)
        and (not query.ids or any(_id_matches(job, item) for item in query.ids))
        and (not query.users or job.user in query.users)
        and (not query.partitions or job.partition in query.partitions)
        and (not query.nodes or not query.nodes.isdisjoint(step.nodes))
    ]
    for line in step_lines(query.layout, found, console.clock(), header=not query.noheader):
        console.out(line)
    return 0


def _by_ids(client: Client, ids: list[str], fields: list[str] | None = None) -> list[JobInfo]:
    try:
        return client.jobs(ids=ids, include_finished=True, validate=False, fields=fields)
    except NotFound:  # a server may answer an unknown id with 404 rather than []
        return []


# What squeue reads of every job whatever it shows: its id and state (sorting, -j, the
# default states, -t) and its array (folding pending elements)
_BASE_FIELDS = ("id", "display_id", "state", "array_job_id", "array_task_id", "array_max_running")
# the fields -S sorts by where they are not its column's (``_SORT_NUMBERS``)
_SORT_FIELDS = {
    "i": ("id",),
    "A": ("id",),
    "t": ("state",),
    "T": ("state",),
    "p": ("priority",),
    "Q": ("priority",),
    "D": ("node_count",),
    "C": ("cpus",),
    "V": ("submit_time",),
}
# Query's filters (``_wanted``) and the field each reads
_FILTER_FIELDS = (
    ("users", "user"),
    ("names", "name"),
    ("accounts", "account"),
    ("qos", "qos"),
    ("reservations", "reservation"),
    ("partitions", "partition"),
    ("nodes", "nodes"),
    ("ids", "het_job_id"),
)


def query_fields(query: Query) -> list[str] | None:
    """The ``JobInfo`` fields ``query`` reads (``GET /v1/jobs?fields=``): its columns',
    its sort keys', its filters' and ``_BASE_FIELDS``; None (every field) for --json."""
    if query.json:
        return None
    fields = set(_BASE_FIELDS)
    for part in query.layout:
        if isinstance(part, Field):
            fields.update(LETTER_FIELDS[part.letter])
    for letter, _ in sort_keys(query.sort):
        fields.update(_SORT_FIELDS.get(letter) or LETTER_FIELDS.get(letter, ()))
    fields.update(name for given, name in _FILTER_FIELDS if getattr(query, given))
    return sorted(fields)


def _server_states(states: set[str] | None) -> list[str] | None:
    """-t's states for the server to filter by (``state=``): the names HAL has of them,
    where they are not every one (the others, Slurm's that HAL never gives a job,
    match nothing: squeue's own filter drops them)."""
    from hal.core.state_names import JOB_STATE_CODES

    known = sorted(set(states or ()) & JOB_STATE_CODES.keys())
    return known if known and len(known) < len(JOB_STATE_CODES) else None


def _wanted(query: Query) -> Callable[[JobInfo], bool]:
    """Whether a job is one ``query`` shows: the checks it asks for, made once (a
    queue of 100,000 jobs goes through them)."""
    states: set[str] | frozenset[str] | None = query.states
    if states is None and not query.json:
        states = DEFAULT_STATES  # (with -j too: Slurm 22.05.8 needs -t all; --json lists ended)
    checks: list[Callable[[JobInfo], bool]] = []
    if query.ids:
        ids = query.ids
        checks.append(lambda job: any(_id_matches(job, item) for item in ids))
    if query.nodes:
        nodes = query.nodes
        checks.append(lambda job: not nodes.isdisjoint(job.nodes))
    if query.partitions:  # (a pending job may list several: -p a,b)
        parts = set(query.partitions)
        checks.append(lambda job: not parts.isdisjoint(job.partition.split(",")))
    for given, read in (
        (query.users, lambda job: job.user),
        (query.names, lambda job: job.name),
        (query.accounts, lambda job: job.account or ""),
        (query.qos, lambda job: job.qos or ""),
        (query.reservations, lambda job: job.reservation or ""),
    ):
        if given:
            checks.append(_one_of(set(given), read))
    if states is not None:
        shown = frozenset(states)
        checks.insert(0, lambda job: job.state in shown)
    if len(checks) <= 1:
        return checks[0] if checks else lambda job: True
    return lambda job: all(check(job) for check in checks)


def _one_of(given: set[str], read: Callable[[JobInfo], str]) -> Callable[[JobInfo], bool]:
    return lambda job: read(job) in given


def _id_matches(job: JobInfo, item: str) -> bool:
    if "_" in item or "+" in item:  # an array element, or a het job component
        return job.display_id == item
    number = int(item)
    return number in (job.id, job.array_job_id, job.het_job_id)


# squeue's columns Slurm 22.05.8's print.c passes with cut_output false: right-aligned, a
# node list or a duration is padded, never cut (%.3N of a running job is "localhost",
# %.2l of two days "2-00:00:00"); left-aligned (%3N, %2l) it is cut, as are a pending
# job's "(Reason)", UNLIMITED (%.2l: "UN"), every other column and the titles but these
_NODE_LISTS = frozenset("NnxR")
_DURATIONS = frozenset("lLM")  # TIME_LIMIT, TIME_LEFT, TIME (-O TimeLimit, TimeLeft, TimeUsed)
_NODE_LIST_TITLES = frozenset("NR")


def _uncut(letter: str, value: str) -> bool:
    if letter in _NODE_LISTS:
        return not value.startswith("(")
    return letter in _DURATIONS and value[:1].isdigit()


def job_lines(
    layout: list[Field | str], jobs: list[JobInfo], now: float, *, header: bool
) -> list[str]:
    letters = {part.letter for part in layout if isinstance(part, Field)}
    titles = {letter: JOB_LETTERS[letter][0] for letter in letters}
    columns = {letter: _column(letter, jobs, now) for letter in letters}
    return render_columns(
        layout,
        titles,
        columns,
        len(jobs),
        header=header,
        uncut=_uncut,
        uncut_letters=_NODE_LISTS | _DURATIONS,
        whole_titles=_NODE_LIST_TITLES,
    )


def _column(letter: str, jobs: list[JobInfo], now: float) -> list[str]:
    from operator import attrgetter  # (where jobs are laid out: not start-up's)

    plain = PLAIN_LETTERS.get(letter)
    if plain is not None:
        return list(map(attrgetter(plain), jobs))
    stamped = TIME_LETTERS.get(letter)
    if stamped is not None:
        return timestamps(list(map(attrgetter(stamped), jobs)))
    return by_fields(JOB_LETTERS[letter][1], LETTER_FIELDS[letter], jobs, now)


def by_fields(
    value: Callable[[JobInfo, float], T], fields: tuple[str, ...], jobs: list[JobInfo], now: float
) -> list[T]:
    """``value`` of each job, worked out once for each distinct combination of the
    ``fields`` it reads (``LETTER_FIELDS``, checked by test_squeue_fields.py): a queue of
    100,000 jobs has few times used, limits, submit times; job by job where a field
    holds a list (a running job's nodes: not a key)."""
    if not jobs:
        return []
    if not fields:  # (a column that reads no field: the same for every job)
        return [value(jobs[0], now)] * len(jobs)
    if not _LIST_FIELDS.isdisjoint(fields):
        return [value(job, now) for job in jobs]
    from operator import attrgetter

    keys = list(map(attrgetter(*fields), jobs))
    first = dict(zip(keys, jobs, strict=True))
    worked = {key: value(job, now) for key, job in first.items()}
    return list(map(worked.__getitem__, keys))


# JobInfo's fields that hold a list
_LIST_FIELDS = frozenset(name for name, value in JOB_DEFAULTS.items() if value == ())


def fold_arrays(jobs: list[JobInfo]) -> list[JobInfo]:
    """Fold each array's pending elements into one line, ``4_[1-3%2]``, as Slurm shows its
    pending array record. A single pending element keeps its own id (``4_3``)."""
    from operator import attrgetter

    if not any(map(attrgetter("array_job_id"), jobs)):  # (no array: no call a job)
        return list(jobs)
    pending: dict[int, list[JobInfo]] = {}
    for job in jobs:
        if job.state == "PENDING" and job.array_job_id is not None:
            pending.setdefault(job.array_job_id, []).append(job)
    out: list[JobInfo] = []
    emitted: set[int] = set()
    for job in jobs:
        array_id = job.array_job_id
        group = pending.get(array_id, []) if array_id is not None else []
        if array_id is None or len(group) < 2 or job.state != "PENDING":
            out.append(job)
            continue
        if array_id in emitted:
            continue
        emitted.add(array_id)
        first = min(group, key=lambda j: j.array_task_id or 0)
        indices = compress_indices([j.array_task_id or 0 for j in group])
        limit = f"%{first.array_max_running}" if first.array_max_running else ""
        # a copy, the model's or a record's alike (``HalClient.jobs(validate=False)``)
        import copy

        folded = copy.copy(first)
        folded.display_id, folded.array_task_id = f"{array_id}_[{indices}{limit}]", None
        out.append(folded)
    return out


# Slurm sorts states by their internal number: pending first, then running...
_STATE_ORDER = {
    "PENDING": 0, "RUNNING": 1, "COMPLETING": 1, "SUSPENDED": 2, "COMPLETED": 3,
    "CANCELLED": 4, "FAILED": 5, "TIMEOUT": 6, "NODE_FAIL": 7, "PREEMPTED": 8,
    "BOOT_FAIL": 9, "DEADLINE": 10, "OUT_OF_MEMORY": 11,
}  # fmt: skip


def _state_rank(job: JobInfo) -> int:
    """A job's state as -S t sorts it (``_STATE_ORDER``; one call a job, not two)."""
    return _STATE_ORDER.get(job.state, 99)


def _limit(seconds: float) -> float:
    """A time limit to sort by: none (UNLIMITED) is the longest, as Slurm's INFINITE."""
    return seconds if seconds > 0 else float("inf")


# -S keys that sort by a number (the others by their column's text; the state's rank,
# ``t`` and ``T``, is ``_state_rank`` itself: ``_sort_key``)
_SORT_NUMBERS: dict[str, Callable[[JobInfo, float], float]] = {
    "i": lambda j, now: j.id,
    "A": lambda j, now: j.id,
    "p": lambda j, now: j.priority,
    "Q": lambda j, now: j.priority,
    "D": lambda j, now: j.node_count,
    "C": lambda j, now: j.cpus,
    "V": lambda j, now: j.submit_time,
    "l": lambda j, now: _limit(j.time_limit_seconds),
    "L": lambda j, now: _limit(j.time_limit_seconds) - time_used(j, now),
    "M": time_used,
    "S": lambda j, now: j.start_time or j.expected_start or float("inf"),
}


def sort_jobs(jobs: list[JobInfo], spec: str, now: float) -> list[JobInfo]:
    """``--sort`` keys (``P,t,-p``, see ``sort_keys``); ``-`` reverses a key. Ties keep
    job-id order."""
    from operator import attrgetter

    if any(map(attrgetter("array_job_id"), jobs)):
        ordered = sorted(jobs, key=lambda j: (j.array_job_id or j.id, j.array_task_id or 0))
    else:  # (no array: by id, no call a job; ids are distinct)
        ordered = sorted(jobs, key=attrgetter("id"))
    for letter, descending in reversed(sort_keys(spec)):
        if letter in _IGNORED_SORT_LETTERS:
            continue
        ordered.sort(key=_sort_key(letter, now), reverse=descending)
    return ordered


# -S keys that are one field as it is: read without a call a job
_SORT_FIELD = {
    "i": "id",
    "A": "id",
    "p": "priority",
    "Q": "priority",
    "D": "node_count",
    "C": "cpus",
    "V": "submit_time",
}


def _sort_key(letter: str, now: float) -> Callable[[JobInfo], float | str]:
    """What -S ``letter`` sorts a job by: a number, or its column's text."""
    from operator import attrgetter

    field = _SORT_FIELD.get(letter)
    if field is not None:
        return attrgetter(field)
    if letter in ("t", "T"):
        return _state_rank
    number = _SORT_NUMBERS.get(letter)
    if number is not None:
        return lambda job: number(job, now)
    plain = PLAIN_LETTERS.get(letter)  # (a column's text, as it is)
    if plain is not None:
        return attrgetter(plain)
    text = JOB_LETTERS[letter][1]
    return lambda job: text(job, now)
