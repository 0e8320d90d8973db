"""Slurm's option syntaxes, parsed once for the server and the command line.

Every parser takes the text a user typed and returns core values in base units (seconds,
bytes, Unix time). On bad input it raises ``InvalidRequest`` whose message shows what to
write instead and whose ``field`` names the Slurm option, so ``sbatch`` on the command line
and ``POST /v1/jobs`` on the server reject the same input with the same words.

Deliberate differences from Slurm, each documented at its parser:

- ``parse_time_limit`` keeps seconds exact, for HAL's own API and config; the
  Slurm-compatible commands round what it returns up to whole minutes
  (``whole_minutes``), as Slurm keeps every job, step and reservation time.
- ``parse_dependency`` takes plain integer job ids only (no ``123_4``, no ``after:1+5``).
- ``parse_gres`` knows only the ``gpu`` gres.

Pure functions: no I/O, no clock (``parse_begin`` is handed ``now``).
"""

from __future__ import annotations

from hal.core.errors import InvalidRequest
from hal.core.units import MiB

# sbatch and squeue import this module at start-up: the job types (dataclasses),
# ``datetime``, ``signal`` and ``hostlist`` are imported by the parsers that need them,
# and so is ``re``, by the rarer options' (``--begin``, ``-L``, a umask): with the
# ``enum``, ``functools`` and ``collections`` it loads it costs 0.6× a bare interpreter's
# start. The common shapes (integers, memory, GPU types) are read by the plain
# functions below, each a pattern's exact equal (tests/unit/compat/test_plain_patterns.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

    from hal.core.job import ArraySpec, Dependency, DependencyTerm, SignalSpec, TopologyConstraint

DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize
DEFAULT_SIGNAL_SECONDS = 60  # --signal without @secs
MAX_SIGNAL_SECONDS = 0xFFFF  # Slurm stores the lead time in 16 bits

_ASCII_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NAME_CHARS = _ASCII_ALNUM | frozenset("._-")


def is_digits(text: str) -> bool:
    r"""``re.match(r"^\d+$", text)``: one or more decimal digits, of any script as ``\d``
    (and ``int``) read them; one final newline allowed, as ``$`` allows it."""
    return text.removesuffix("\n").isdecimal()


def is_plain_name(text: str) -> bool:
    r"""``re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", text)``: how GPU types and licenses
    are named (ASCII letters and digits, then also ``.``, ``_``, ``-``); one final newline
    allowed, as ``$`` allows it."""
    body = text.removesuffix("\n")
    return body[:1] in _ASCII_ALNUM and _NAME_CHARS.issuperset(body)


def _int(text: str, what: str, field: str, hint: str) -> int:
    if not is_digits(text):
        raise InvalidRequest(f"invalid --{field} {what} {text!r}: {hint}", field=field)
    return int(text)


# -- time limits --------------------------------------------------------------------------

_TIME_FORMATS = "minutes (30), MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 2-12:00:00)"
_NO_LIMIT_WORDS = ("unlimited", "infinite", "-1")


def _option(field: str) -> str:
    """``--time`` for a command-line option, ``TimeLimit`` for an ``scontrol`` key."""
    return field if field[:1].isupper() else f"--{field}"


def _time_hint(*, unlimited: bool = True) -> str:
    """The forms ``parse_time_limit`` accepts, for error messages."""
    return f"write {_TIME_FORMATS}" + (", or 0/UNLIMITED for no limit" if unlimited else "")


def parse_time_limit(text: str, *, field: str = "time", unlimited: bool = True) -> int:
    """``--time`` in seconds; 0 means no limit.

    Accepts ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S`` and
    ``0``/``UNLIMITED``/``infinite``. Slurm's resolution is one minute and it rounds seconds
    up (``--time=0:30`` becomes 1:00): the Slurm-compatible commands pass what this returns
    through ``whole_minutes``; HAL's own API and config keep the seconds, as HAL's timers
    are finer and short test jobs benefit. Fields are not range-checked, as in Slurm
    (``90`` and ``0:90:00`` both mean 90 minutes).

    ``unlimited=False`` is for a duration that must end (a reservation, a wait): the
    words ``UNLIMITED``/``infinite``/``-1`` are refused and the hint does not offer them; a
    zero is still returned, for the caller to judge. Errors quote the whole value as
    written; ``field`` names the option (``time``) or ``scontrol`` key (``TimeLimit``).
    """
    raw = text.strip()
    label = _option(field)
    hint = _time_hint(unlimited=unlimited)
    if raw.lower() in _NO_LIMIT_WORDS:
        if unlimited:
            return 0
        raise InvalidRequest(f"{label} cannot be unlimited (got {text!r}): {hint}", field=field)
    if not raw:
        raise InvalidRequest(f"empty {label}: {hint}", field=field)
    dashed = "-" in raw
    day_text, rest = raw.split("-", 1) if dashed else ("0", raw)
    parts = rest.split(":")
    if len(parts) > 3 or not all(is_digits(p) for p in (day_text, *parts)):
        raise InvalidRequest(f"invalid {label} value {text!r}: {hint}", field=field)
    days, *nums = (int(p) for p in (day_text, *parts))
    if dashed:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = [*nums, 0, 0][:3]
    elif len(nums) == 1:  # M
        hours, minutes, seconds = 0, nums[0], 0
    elif len(nums) == 2:  # M:S
        hours, minutes, seconds = 0, nums[0], nums[1]
    else:  # H:M:S
        hours, minutes, seconds = nums
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def whole_minutes(seconds: int) -> int:
    """``seconds`` rounded up to a whole minute, as Slurm 22.05.8 keeps a time limit
    (``time_str2mins``): ``sbatch -t 5:30`` is ``TimeLimit=00:06:00``, ``-t 0:0:1`` and
    ``-t 0:59`` are ``00:01:00``; so are ``--time-min``, ``srun -t``, ``scontrol update
    TimeLimit=``/``TimeMin=`` (``TimeLimit=+0:30`` adds a minute) and a reservation's
    ``Duration=``. 0 (no limit) stays 0."""
    return -(-seconds // 60) * 60


# -- memory -------------------------------------------------------------------------------

_UNIT_SHIFT = {"K": 10, "M": 20, "G": 30, "T": 40}


def parse_memory(text: str, *, field: str = "mem") -> int:
    """``--mem`` and friends in bytes: an integer in MiB by default, or with a ``K``, ``M``,
    ``G`` or ``T`` suffix (binary units, an optional trailing ``B``). ``0`` is returned as 0;
    for ``--mem`` it means "all the memory of the node".

    Slurm counts memory in whole MiB and rounds a ``K`` value up (str_to_mbytes:
    ``--mem=100K`` is ``MinMemoryNode=1M``, ``1025K`` is ``2M``); so does HAL. Rounding down
    would turn ``--mem=100K`` into ``--mem=0``, a request for the whole node."""
    # (``^(\d+)([KMGT]?)B?$`` in any case, read from the right)
    number = text.strip()
    number = number[:-1] if number[-1:] in ("B", "b") else number
    unit = number[-1:].upper()
    number = number[:-1] if unit in _UNIT_SHIFT else number
    if not number.isdecimal():
        raise InvalidRequest(
            f"invalid --{field} value {text!r}: write an integer in MiB (4000) or with a unit "
            "suffix K, M, G or T (500M, 16G)",
            field=field,
        )
    value = int(number) << _UNIT_SHIFT.get(unit, 20)
    value = -(-value // MiB) * MiB  # whole MiB, rounded up (0K stays 0)
    if value >= 1 << 63:
        raise InvalidRequest(f"--{field} value {text!r} is too large", field=field)
    return value


# -- arrays -------------------------------------------------------------------------------

_ARRAY_HINT = "write index ranges like 0-15, 0,6,16-32, 0-15:4, optionally with %N (0-15%4)"


def parse_array(
    text: str, max_array_size: int = DEFAULT_MAX_ARRAY_SIZE, *, field: str = "array"
) -> ArraySpec:
    """``--array``: ``0-15``, ``0,6,16-32``, ``0-15:4``, and a ``%N`` limit on how many
    elements run at once. Indices go from 0 to ``max_array_size - 1`` (Slurm's
    MaxArraySize); duplicates collapse and indices come back sorted."""
    from hal.core.job import ArraySpec

    raw = text.strip()
    spec, _, throttle_text = raw.partition("%")
    max_running = 0
    if throttle_text:
        max_running = _int(throttle_text, "limit after %", field, _ARRAY_HINT)
        if max_running < 0:  # (%0: no limit, as Slurm 22.05.8 takes it)
            raise InvalidRequest(
                f"invalid --{field} {raw!r}: the %N limit must be at least 0", field=field
            )
    if not spec:
        raise InvalidRequest(f"invalid --{field} {raw!r}: {_ARRAY_HINT}", field=field)
    indices: set[int] = set()
    for part in spec.split(","):
        rng, _, step_text = part.partition(":")
        step = _int(step_text, "step", field, _ARRAY_HINT) if step_text else 1
        first_text, dash, last_text = rng.partition("-")
        first = _int(first_text, "index", field, _ARRAY_HINT)
        last = _int(last_text, "index", field, _ARRAY_HINT) if dash else first
        if step < 1 or last < first:
            raise InvalidRequest(
                f"invalid --{field} range {part!r}: ranges go up (0-15) with a step of at least 1",
                field=field,
            )
        if last > max_array_size - 1:
            raise InvalidRequest(
                f"invalid --{field} {raw!r}: the largest index allowed is "
                f"{max_array_size - 1} (MaxArraySize={max_array_size})",
                field=field,
            )
        indices.update(range(first, last + 1, step))
    return ArraySpec(indices=tuple(sorted(indices)), max_running=max_running, text=raw)


# -- dependencies -------------------------------------------------------------------------

_DEP_HINT = (
    "write type:jobid[:jobid...] terms joined by ',' (all must hold) or '?' (any may hold), "
    "with types after, afterany, afterok, afternotok, aftercorr, or the word singleton "
    "(e.g. afterok:123:124,afterany:125)"
)


def parse_dependency(
    text: str,
    *,
    field: str = "dependency",
    element: Callable[[int, int], int] | None = None,
) -> Dependency:
    """``--dependency``. Terms are joined by ``,`` (all must hold) or ``?`` (any may hold);
    mixing both is rejected, as Slurm does. A term without a type (``123``) means
    ``afterany``, Slurm's default.

    An array element ``123_4`` is the element's own job id, which ``element(123, 4)``
    gives (the server's; raising ``InvalidRequest`` when the array has no such element);
    without it (a client checking the syntax) the array's id stands in. Slurm's
    ``after:123+10`` (start plus minutes) is rejected with a message saying so.
    """
    from hal.core.job import Dependency

    raw = text.strip()
    if not raw:
        raise InvalidRequest(f"empty {_option(field)}: {_DEP_HINT}", field=field)
    if "," in raw and "?" in raw:
        raise InvalidRequest(
            f"invalid {_option(field)} {raw!r}: join all terms with ',' (all must hold) or "
            "all with '?' (any may hold), not both",
            field=field,
        )
    any_of = "?" in raw
    terms: list[DependencyTerm] = []
    for term in raw.split("?" if any_of else ","):
        terms.append(_dependency_term(term.strip(), raw, field, element))
    return Dependency(terms=tuple(terms), any_of=any_of)


def _dependency_term(
    term: str, raw: str, field: str, element: Callable[[int, int], int] | None
) -> DependencyTerm:
    from hal.core.job import DependencyKind, DependencyTerm

    kinds = {k.value: k for k in DependencyKind}
    head, _, tail = term.partition(":")
    kind_text = head.lower()
    if kind_text == "singleton":
        if tail:
            raise InvalidRequest(
                f"invalid {_option(field)} term {term!r}: singleton takes no job ids", field=field
            )
        return DependencyTerm(DependencyKind.SINGLETON)
    if is_digits(head):  # no type given: Slurm's default is afterany
        kind, id_texts = DependencyKind.AFTERANY, term.split(":")
    elif kind_text in kinds:
        kind, id_texts = kinds[kind_text], (tail.split(":") if tail else [])
    elif kind_text in ("afterburstbuffer", "expand"):
        raise InvalidRequest(
            f"{_option(field)} type {head!r} is not supported by HAL; use after, afterany, "
            "afterok, afternotok, aftercorr or singleton",
            field=field,
        )
    else:
        raise InvalidRequest(
            f"invalid {_option(field)} type {head!r} in {raw!r}: {_DEP_HINT}", field=field
        )
    if not id_texts:
        raise InvalidRequest(
            f"invalid {_option(field)} term {term!r}: {kind.value} needs at least one job id",
            field=field,
        )
    ids: list[int] = []
    elements: list[int] = []
    for id_text in id_texts:
        if "+" in id_text:
            raise InvalidRequest(
                f"invalid {_option(field)} term {term!r}: HAL does not support the "
                "after:jobid+minutes form; use after:jobid, or delay the job with --begin",
                field=field,
            )
        if "_" in id_text:
            array_text, _, index_text = id_text.partition("_")
            array = _int(array_text, "job id", field, _DEP_HINT)
            index = _int(index_text, "array index", field, _DEP_HINT)
            ids.append(array if element is None else element(array, index))
            elements.append(ids[-1])
            continue
        ids.append(_int(id_text, "job id", field, _DEP_HINT))
    return DependencyTerm(kind, tuple(ids), tuple(elements))


# -- signals ------------------------------------------------------------------------------

_SIGNAL_HINT = "write [R:][B:]SIG[@seconds], e.g. USR1, SIGTERM@120, B:USR2@30 or 10@60"
_SIGNAL_ERROR = "Invalid --signal specification"  # Slurm 22.05.8's words, whatever is wrong


def parse_signal_name(text: str, *, field: str = "signal") -> int:
    """A signal by name (``USR1``, ``SIGUSR1``, any case) or number (``10``)."""
    import signal as _signal

    raw = text.strip()
    if is_digits(raw):
        try:
            return int(_signal.Signals(int(raw)))
        except ValueError:
            raise InvalidRequest(
                f"invalid --{field}: {raw} is not a signal number on this system",
                field=field,
            ) from None
    name = raw.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(_signal.Signals[name])
    except KeyError:
        raise InvalidRequest(
            f"invalid --{field}: unknown signal {raw!r}; {_SIGNAL_HINT}", field=field
        ) from None


def parse_signal(text: str, *, field: str = "signal", batch: bool = True) -> SignalSpec:
    """``--signal=[R:][B:]SIG[@secs]``: send SIG that many seconds (default 60) before the
    time limit; ``B:`` sends it to the batch shell only (sbatch's alone: ``batch=False``
    for srun and salloc, which refuse it as Slurm 22.05.8's do). ``R:`` (``RB:``, ``BR:``)
    lets Slurm start the job in a reservation's ``MaxStartDelay`` window; HAL's
    reservations have none, so it is taken and changes nothing. Every mistake starts with
    Slurm's "Invalid --signal specification"."""

    def invalid(why: str) -> InvalidRequest:
        hint = _SIGNAL_HINT if batch else "write [R:]SIG[@seconds], e.g. USR1, TERM@120 or 10@60"
        return InvalidRequest(f"{_SIGNAL_ERROR}: {raw!r} {why}; {hint}", field=field)

    raw = text.strip()
    body = raw
    batch_only = False
    if ":" in body:
        prefix, _, body = body.partition(":")
        flags = prefix.upper()
        allowed = "RB" if batch else "R"
        if not flags or set(flags) - set(allowed) or len(set(flags)) < len(flags):
            raise invalid(f"(before ':' only {' or '.join(allowed)})")
        batch_only = "B" in flags
    sig_text, at, secs_text = body.partition("@")
    seconds = DEFAULT_SIGNAL_SECONDS
    if at:
        if not is_digits(secs_text) or int(secs_text) > MAX_SIGNAL_SECONDS:
            raise invalid(f"(the lead time is 0 to {MAX_SIGNAL_SECONDS} seconds)")
        seconds = int(secs_text)
    try:
        signum = parse_signal_name(sig_text, field=field)
    except InvalidRequest:
        signum = 0
    if signum == 0:
        raise invalid(f"({sig_text.strip()!r} is no signal)")
    from hal.core.job import SignalSpec

    return SignalSpec(signum, seconds, batch_only)


# -- begin times --------------------------------------------------------------------------

_BEGIN_HINT = (
    "write now, now+60 (seconds), now+1hour, YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], "
    "MM/DD[/YY], midnight, noon, today or tomorrow"
)
_DELTA_UNITS = {
    **dict.fromkeys(("", "s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400),
}
# (the rarer options' patterns: ``re`` is imported, and they are compiled, on first use)
_NOW_DELTA = r"^now(?:([+-])(\d+)([a-z]*))?$"
_ISO = r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[Tt](\d{1,2}):(\d{2})(?::(\d{2}))?)?$"
_CLOCK = r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?$"
_US_DATE = r"^(\d{1,2})[/.](\d{1,2})(?:[/.](\d{2,4}))?$"
_NAMED_HOURS = {"midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}


def parse_begin(text: str, now: float, *, field: str = "begin", past: bool = False) -> float:
    """``--begin`` (and sacct's ``--starttime``/``--endtime``) as Unix time, in the local
    time zone as sbatch does. A bare time of day that has already passed today means
    tomorrow; ``midnight``/``noon``/``fika``/``teatime`` behave likewise, and so does a
    month/day already past this year (next year). With ``past`` (sacct, Slurm's
    ``parse_time(..., past=1)``) a time of day is today's, even one still ahead, and a
    month/day of a later month than this one last year's. ``today`` is 00:00 today and
    ``tomorrow`` 00:00 tomorrow. ``now-2days`` is allowed (sacct uses it)."""
    import re
    from datetime import datetime, timedelta

    raw = text.strip().lower()
    base = datetime.fromtimestamp(now)
    midnight = base.replace(hour=0, minute=0, second=0, microsecond=0)
    m = re.match(_NOW_DELTA, raw)
    if m:
        if not m.group(1):
            return now
        unit = _DELTA_UNITS.get(m.group(3))
        if unit is None:
            raise InvalidRequest(
                f"invalid {_option(field)} {text!r}: unknown unit {m.group(3)!r}; use seconds, "
                "minutes, hours, days or weeks (now+1hour)",
                field=field,
            )
        delta = int(m.group(2)) * unit
        return now + delta if m.group(1) == "+" else now - delta
    if raw == "today":
        return midnight.timestamp()
    if raw == "tomorrow":
        return (midnight + timedelta(days=1)).timestamp()
    if raw in _NAMED_HOURS:
        return _time_of_day(base, midnight.replace(hour=_NAMED_HOURS[raw]), past)
    m = re.match(_ISO, raw)
    if m:
        y, mo, d, h, mi, s = (int(g) if g else 0 for g in m.groups())
        return _local((y, mo, d, h, mi, s), text, field).timestamp()
    m = re.match(_CLOCK, raw)
    if m:
        hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if m.group(4):
            if not 1 <= hour <= 12:
                raise InvalidRequest(
                    f"invalid {_option(field)} {text!r}: {_BEGIN_HINT}", field=field
                )
            hour = hour % 12 + (12 if m.group(4) == "pm" else 0)
        when = _local((base.year, base.month, base.day, hour, minute, second), text, field)
        return _time_of_day(base, when, past)
    m = re.match(_US_DATE, raw)
    if m:
        month, day = int(m.group(1)), int(m.group(2))
        year = base.year
        if m.group(3):
            year = int(m.group(3))
            year += 2000 if year < 100 else 0
        when = _local((year, month, day, 0, 0, 0), text, field)
        if not m.group(3) and not past and when < midnight:  # MM/DD past this year: next
            when = _local((year + 1, month, day, 0, 0, 0), text, field)
        elif not m.group(3) and past and month > base.month:  # a later month: last year's
            # (Slurm 22.05.8's sacct compares the month only: 11/27 on 26 November is this
            # year's, 12/01 last year's; docs/slurm-checks.md)
            when = _local((year - 1, month, day, 0, 0, 0), text, field)
        return when.timestamp()
    raise InvalidRequest(f"invalid {_option(field)} {text!r}: {_BEGIN_HINT}", field=field)


def _local(fields: tuple[int, int, int, int, int, int], text: str, field: str) -> datetime:
    """A local datetime from (year, month, day, hour, minute, second)."""
    from datetime import datetime

    try:
        return datetime(*fields)
    except ValueError as err:
        raise InvalidRequest(f"invalid {_option(field)} {text!r}: {err}", field=field) from None


def _time_of_day(base: datetime, when: datetime, past: bool) -> float:
    # Slurm: a time of day without a date that has already passed means that time
    # tomorrow; looking back (sacct) it is always today's, even one still ahead (Slurm
    # 22.05.8's sacct refuses ``-S 23:59`` at 02:56 as after the end; docs/slurm-checks.md)
    if not past and when < base:
        from datetime import timedelta

        when += timedelta(days=1)
    return when.timestamp()


# -- GPUs and nodes -----------------------------------------------------------------------

_GRES_HINT = "write gpu, gpu:N or gpu:TYPE:N per node (e.g. gpu:2, gpu:a100:4)"
_GPUS_HINT = "write N or TYPE:N (e.g. 2, a100:4)"


def parse_gres(text: str, *, field: str = "gres") -> tuple[str | None, int]:
    """``--gres`` → (GPU type or None, GPUs per node). Only the ``gpu`` gres exists in HAL;
    any other name (``license``, ``mps``, ``shard``...) is rejected rather than ignored.
    ``gpu:a100`` means one GPU of that type; ``none`` clears the request: (None, 0)."""
    raw = text.strip()
    if raw.lower() == "none":
        return None, 0
    items = [item.strip().removeprefix("gres/") for item in raw.split(",")]
    for item in items:
        name = item.split(":")[0]
        if name != "gpu":
            raise InvalidRequest(
                f"--{field} {name!r} is not supported: HAL knows only the gpu gres; {_GRES_HINT}",
                field=field,
            )
    if len(items) > 1:
        raise InvalidRequest(f"invalid --{field} {raw!r}: give gpu once; {_GRES_HINT}", field=field)
    parts = items[0].split(":")
    if len(parts) == 1:
        return None, 1
    if len(parts) == 2:
        if is_digits(parts[1]):
            return None, int(parts[1])
        return _gpu_type(parts[1], field, _GRES_HINT), 1
    if len(parts) == 3:
        return _gpu_type(parts[1], field, _GRES_HINT), _int(parts[2], "count", field, _GRES_HINT)
    raise InvalidRequest(f"invalid --{field} {raw!r}: {_GRES_HINT}", field=field)


def parse_gpus(text: str, *, field: str = "gpus") -> tuple[str | None, int]:
    """``--gpus``, ``--gpus-per-node``, ``--gpus-per-task``: ``[type:]N`` → (type, N)."""
    raw = text.strip().removeprefix("gpu:")
    type_text, colon, count_text = raw.rpartition(":")
    count = _int(count_text, "count", field, _GPUS_HINT)
    if not colon:
        return None, count
    return _gpu_type(type_text, field, _GPUS_HINT), count


def _gpu_type(text: str, field: str, hint: str) -> str:
    if not is_plain_name(text):
        raise InvalidRequest(f"invalid --{field} GPU type {text!r}: {hint}", field=field)
    return text


_NODES_HINT = "write a node count (2) or a range min-max (2-4)"


def parse_nodes(text: str, *, field: str = "nodes") -> tuple[int, int]:
    """``--nodes``: ``N`` or ``min-max`` → (min, max). Slurm's count lists (``2,4,8``) are
    not supported."""
    raw = text.strip()
    first, dash, last = raw.partition("-")
    low = _int(first, "value", field, _NODES_HINT)
    high = _int(last, "value", field, _NODES_HINT) if dash else low
    if low < 1 or high < low:
        raise InvalidRequest(
            f"invalid --{field} {raw!r}: need at least one node and min <= max; {_NODES_HINT}",
            field=field,
        )
    return low, high


# -- host lists ---------------------------------------------------------------------------


_HOSTLIST_SYNTAX = frozenset("[],")


def expand_hostlist(text: str, *, field: str = "nodelist", duplicates: bool = False) -> list[str]:
    """``n[1-3],gpu7`` → ``["n1", "n2", "n3", "gpu7"]`` (order kept, as Slurm does); a
    name given twice is kept twice only with ``duplicates`` (``srun -m arbitrary``)."""
    import hostlist

    try:
        names: list[str] = hostlist.expand_hostlist(text.strip(), allow_duplicates=duplicates)
        return names
    except hostlist.BadHostlist as err:
        raise InvalidRequest(
            f"invalid {_option(field)} host list {text!r} ({err}); "
            "write names like n1,n2 or n[1-4,7]",
            field=field,
        ) from None


def compress_hostlist(names: list[str] | tuple[str, ...]) -> str:
    """``["n1", "n2", "n3"]`` → ``n[1-3]`` (sorted, as sinfo and squeue print).

    One name is itself, stripped, as ``hostlist`` gives it back: squeue's NODELIST of a
    one-node job, the common case, then needs neither ``hostlist`` nor the ``re`` it
    imports (squeue's start-up). A name with ``[``, ``]`` or ``,`` still goes to
    ``hostlist``, which refuses it."""
    if len(names) == 1 and not _HOSTLIST_SYNTAX.intersection(names[0]):
        return names[0].strip()
    import hostlist

    collected: str = hostlist.collect_hostlist(list(names))
    return collected


def hostlist_in_order(names: list[str] | tuple[str, ...]) -> str:
    """Slurm's ``scontrol show hostlist``: names compressed in the order given, duplicates
    kept (``n2,n1`` → ``n[2,1]``, ``n1,n1,n2`` → ``n[1,1-2]``, ``n3,n1,n2,n10,a1`` →
    ``n[3,1-2,10],a1``): neighbours of one prefix share a bracket, and numbers that
    follow each other in it make a range. Order decides rank placement in host files,
    so it is not sorted."""
    groups: list[tuple[str, int, list[list[int]]]] = []  # (prefix, width, runs)
    for name in names:
        digits = len(name) - len(name.rstrip("0123456789"))
        if not digits:
            groups.append((name, -1, []))
            continue
        prefix, number = name[:-digits], int(name[-digits:])
        padded = digits > 1 and name[-digits] == "0"  # (zero-padded names keep their width)
        last = groups[-1] if groups else None
        if (
            last is not None
            and last[0] == prefix
            and ((last[1] == 0 and not padded) or (last[1] > 0 and last[1] == digits))
        ):
            runs = last[2]
            if runs[-1][1] + 1 == number:
                runs[-1][1] = number
            else:
                runs.append([number, number])
        else:
            groups.append((prefix, digits if padded else 0, [[number, number]]))
    out = []
    for prefix, width, runs in groups:
        if width < 0:
            out.append(prefix)
            continue
        text = [f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs]
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        out.append(prefix + text[0] if single else f"{prefix}[{','.join(text)}]")
    return ",".join(out)


def duration_long(seconds: float) -> str:
    """Slurm's secs2time_str (scontrol, sacct, job mail): ``HH:MM:SS``, ``D-HH:MM:SS``
    from a day on; a negative time reads as 0."""
    days, rest = divmod(max(0, int(seconds)), 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


# -- topology -----------------------------------------------------------------------------

_SWITCHES_HINT = "write --switches=COUNT or --switches=COUNT@MAX-WAIT, e.g. --switches=2@1:00:00"


def parse_switches(text: str, *, field: str = "switches") -> tuple[int, int | None]:
    """``--switches=count[@max-time]`` → (count, max wait in seconds or None for the
    scheduler's default). ``@0`` means do not wait at all."""
    count_text, at, wait_text = text.strip().partition("@")
    count = _int(count_text, "switch count", field, _SWITCHES_HINT)
    if count < 1:
        raise InvalidRequest(f"--{field} needs at least 1 switch; {_SWITCHES_HINT}", field=field)
    if not at:
        return count, None
    if not wait_text:
        raise InvalidRequest(f"--{field}: nothing after @; {_SWITCHES_HINT}", field=field)
    try:
        wait = parse_time_limit(wait_text, field=field, unlimited=False)
    except InvalidRequest:
        raise InvalidRequest(
            f"invalid --{field} value {text!r}: {_SWITCHES_HINT}; "
            f"MAX-WAIT is {_TIME_FORMATS}, or 0 for no wait",
            field=field,
        ) from None
    return count, wait


def parse_topology(text: str, *, field: str = "topology") -> TopologyConstraint:
    """``required=LEVEL`` or ``preferred=LEVEL`` → ``TopologyConstraint``. The level
    name is checked by the scheduler, which knows the cluster's levels."""
    mode, eq, level = text.strip().partition("=")
    mode = mode.strip().lower()
    level = level.strip()
    if not eq or mode not in ("required", "preferred") or not level or " " in level:
        raise InvalidRequest(
            f"invalid --{field} {text!r}; write required=LEVEL or preferred=LEVEL, "
            "e.g. --topology required=leaf",
            field=field,
        )
    from hal.core.job import TopologyConstraint

    return TopologyConstraint(level, required=mode == "required")


# -- umask --------------------------------------------------------------------------------

_UMASK = r"^[0-7]{3,4}$"


def parse_umask(text: str, *, field: str = "umask") -> int:
    """A umask as ``SLURM_UMASK`` spells it: three or four octal digits (``022``, ``0077``),
    at most ``0777``."""
    import re

    if not re.match(_UMASK, text) or int(text, 8) > 0o777:
        raise InvalidRequest(
            f"invalid {field} {text!r}: write three or four octal digits, e.g. 0022 or 077",
            field=field,
        )
    return int(text, 8)


def format_umask(mask: int) -> str:
    """``SLURM_UMASK`` as Slurm's sbatch writes it: ``0`` and three octal digits."""
    return f"0{mask & 0o777:03o}"


# -- licenses -----------------------------------------------------------------------------

_LICENSE = r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:[:*](\d+))?$"  # (a name: is_plain_name)
_LICENSES_HINT = "write NAME or NAME:COUNT, comma-separated (e.g. matlab:2,ansys)"


def parse_licenses(text: str, *, field: str = "licenses") -> tuple[tuple[str, int], ...]:
    """``-L matlab:2,ansys`` → ``(("ansys", 1), ("matlab", 2))``: each license the job
    holds while it runs, with its count (1 when not given; ``NAME*N`` as Slurm also
    reads; a name given twice adds up), by name. Slurm's ``|`` (any one of) and ``@db``
    (a remote license server) are refused: HAL has neither."""
    raw = text.strip()
    if not raw:
        return ()
    if "|" in raw or "@" in raw:
        raise InvalidRequest(
            f"invalid --{field} {raw!r}: HAL has no alternative ('|') or remote ('@') "
            f"licenses; {_LICENSES_HINT}",
            field=field,
        )
    import re

    counts: dict[str, int] = {}
    for item in raw.split(","):
        match = re.match(_LICENSE, item.strip())
        if match is None:
            raise InvalidRequest(f"invalid --{field} {item!r}: {_LICENSES_HINT}", field=field)
        count = int(match.group(2) or 1)
        if count < 1:
            raise InvalidRequest(
                f"invalid --{field} {item!r}: a count is at least 1; {_LICENSES_HINT}",
                field=field,
            )
        counts[match.group(1)] = counts.get(match.group(1), 0) + count
    return tuple(sorted(counts.items()))


def format_licenses(licenses: Iterable[tuple[str, int]]) -> str:
    """``matlab:2,ansys:1`` as scontrol and squeue print a job's licenses."""
    return ",".join(f"{name}:{count}" for name, count in licenses)


def compress_indices(indices: list[int]) -> str:
    """``[1, 2, 3, 7]`` → ``1-3,7`` (how squeue prints the pending part of an array)."""
    ranges: list[str] = []
    ordered = sorted(set(indices))
    start = prev = None
    for index in [*ordered, None]:
        if start is not None and (index is None or prev is None or index != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if index is not None and start is None:
            start = index
        prev = index
    return ",".join(ranges)
