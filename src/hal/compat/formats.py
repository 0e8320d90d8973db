"""How Slurm prints times, sizes and columns, shared by the commands.

Slurm prints durations two ways and users see both: squeue and sinfo drop leading zeros
(``0:00``, ``1:26``, ``1:00:00``) while scontrol and sacct pad the hours (``00:01:26``).
Timestamps are local ``YYYY-MM-DDTHH:MM:SS``. Format strings such as ``"%.18i %.9P %R"``
are split into literal text and fields; a ``.`` right-aligns, a number sets the width and
values longer than the width are cut, as squeue does.
"""

from __future__ import annotations

# re-exported: the commands print durations as job mail does
from hal.slurm.syntax import duration_long as duration_long  # noqa: PLC0414

# squeue's start-up: no ``typing``, ``dataclasses`` or ``datetime`` (see ``hal.compat``)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Container, Iterable, Sequence
    from typing import TypeVar

    T = TypeVar("T")

UNLIMITED = "UNLIMITED"


def _parts(seconds: int) -> tuple[int, int, int, int]:
    """Whole seconds (at least 0) as days, hours, minutes and seconds."""
    days, rem = divmod(max(0, seconds), 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    return days, hours, minutes, secs


def duration_short(seconds: float) -> str:
    """squeue/sinfo style: ``M:SS``, ``H:MM:SS`` or ``D-HH:MM:SS``."""
    days, hours, minutes, secs = _parts(int(seconds))
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def limit_short(seconds: int) -> str:
    """squeue's TIME_LIMIT: 0 (no limit) is ``UNLIMITED``."""
    return UNLIMITED if seconds <= 0 else duration_short(seconds)


def limit_long(seconds: int) -> str:
    return UNLIMITED if seconds <= 0 else duration_long(seconds)


def timestamp(when: float | None, missing: str = "N/A") -> str:
    """Local ``YYYY-MM-DDTHH:MM:SS``; ``missing`` when unknown (squeue ``N/A``, sacct and
    scontrol ``Unknown``)."""
    if when is None:
        return missing
    from datetime import datetime

    return datetime.fromtimestamp(when).strftime("%Y-%m-%dT%H:%M:%S")


def timestamps(values: Sequence[float | None], missing: str = "N/A") -> list[str]:
    """``timestamp`` of each of ``values``, each local minute formatted once (a queue's
    submit times are as many floats as jobs). A time whose microseconds round up into
    the next second (``datetime`` rounds them half to even), one before 1970 or past the
    year 6325, and one in a minute that does not run from :00 to :59 locally (a zone's
    offset in seconds, a change of offset within it) is formatted alone."""
    minutes: dict[int, str] = {}  # minute → its local text less the seconds ("" none)
    shown: dict[float | None, str] = {None: missing}
    for when in set(values):
        if when is None:
            continue
        whole = int(when) if 0 <= when < 2**37 else -1
        if whole >= 0 and when - whole < 0.999999:
            minute, second = divmod(whole, 60)
            head = minutes.get(minute)
            if head is None:
                head = minutes[minute] = _minute_head(minute * 60)
            shown[when] = head + _SECONDS[second] if head else timestamp(whole)
        else:
            shown[when] = timestamp(when)
    return list(map(shown.__getitem__, values))


_SECONDS = tuple(f"{second:02d}" for second in range(60))  # (a format each: 0.04 s a queue)


def _minute_head(start: int) -> str:
    """``timestamp`` of the minute from ``start`` less its seconds, where its 60 seconds
    are :00 to :59 of one local minute; "" where not."""
    first = timestamp(start)
    head = first[:-2]
    return head if first.endswith("00") and timestamp(start + 59) == head + "59" else ""


def memory_mib(size_bytes: int) -> str:
    """Slurm's ``convert_num_unit`` from MiB: ``50M``, ``4G``, ``1.50G``, ``0``.

    Slurm moves to the next unit while the value is at least 1024 and a multiple of 512,
    so 1536 MiB prints as 1.50G but 1000 MiB stays 1000M. Slurm counts whole MiB: a
    node's memory that is not a multiple (24105.56 MiB) prints 24105M.
    """
    return _exact_units(float(size_bytes // (1024 * 1024)), "MGTPE")


def memory_kib(size_bytes: int) -> str:
    """The same from KiB, as sacct prints MaxRSS: ``2140K``, ``4M``, ``1.50G``."""
    return _exact_units(size_bytes / 1024, "KMGTPE")


def _exact_units(value: float, units: str) -> str:
    if value == 0:
        return "0"
    index = 0
    while value >= 1024 and value % 512 == 0 and index < len(units) - 1:
        value /= 1024
        index += 1
    if value == int(value):
        return f"{int(value)}{units[index]}"
    return f"{value:.2f}{units[index]}"


def tres_usage(
    cpu_seconds: float, mem_bytes: int, gpu_mem_bytes: int | None, gpu_util: float | None
) -> str:
    """``TRESUsageIn*`` as sacct and sstat print them, with the TRES HAL measures in
    Slurm's order: ``cpu=00:00:07,gres/gpumem=4G,gres/gpuutil=120,mem=81920K``; the gres
    only for a job given GPUs whose agent read them (None: not measured)."""
    items = [f"cpu={duration_long(int(cpu_seconds))}"]
    if gpu_mem_bytes is not None:
        items.append(f"gres/gpumem={memory_kib(gpu_mem_bytes)}")
    if gpu_util is not None:
        items.append(f"gres/gpuutil={round(gpu_util)}")
    items.append(f"mem={memory_kib(mem_bytes)}")
    return ",".join(items)


def cpu_time(seconds: float) -> str:
    """sacct's TotalCPU: ``MM:SS.mmm`` under an hour, else ``HH:MM:SS`` or
    ``D-HH:MM:SS``."""
    total, ms = divmod(max(0, round(seconds * 1000)), 1000)
    if total < 3600:
        return f"{total // 60:02d}:{total % 60:02d}.{ms:03d}"
    return duration_long(total)


def cell(value: str, width: int, right: bool) -> str:
    """One squeue/sinfo column: padded to ``width`` and cut to it; width 0 means as is."""
    if width <= 0:
        return value
    value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


class Field:
    """``%.18i``: letter ``i``, width 18, right-aligned. ``auto`` is sinfo's ``%#P``
    (as wide as the widest value). (A plain class: no ``dataclasses`` at start-up.)"""

    __slots__ = ("auto", "letter", "right", "width")

    def __init__(
        self, letter: str, width: int = 0, right: bool = False, auto: bool = False
    ) -> None:
        self.letter = letter
        self.width = width
        self.right = right
        self.auto = auto

    def _key(self) -> tuple[str, int, bool, bool]:
        return self.letter, self.width, self.right, self.auto

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Field) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Field(letter={!r}, width={!r}, right={!r}, auto={!r})".format(*self._key())


_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz%")


def parse_format(text: str) -> list[Field | str]:
    r"""Split a ``-o`` format into literal strings and fields. ``%%`` is a literal ``%``.

    Each field is ``%[.][-][#][WIDTH]LETTER`` (``re.finditer`` of
    ``%(\.)?(-)?(#)?(\d*)([A-Za-z%])``, read left to right without ``re``: squeue's
    start-up); a ``%`` that starts none is literal text."""
    parts: list[Field | str] = []
    pos = 0  # where the literal text not yet taken starts
    start = text.find("%")
    while start >= 0:
        at = start + 1
        dot = text.startswith(".", at)
        at += dot
        at += text.startswith("-", at)
        auto = text.startswith("#", at)
        at += auto
        digits = at
        while at < len(text) and text[at].isdecimal():
            at += 1
        if at == len(text) or text[at] not in _LETTERS:
            start = text.find("%", start + 1)
            continue
        if start > pos:
            parts.append(text[pos:start])
        letter, width, pos = text[at], text[digits:at], at + 1
        if letter == "%":
            parts.append("%")
        else:
            parts.append(Field(letter=letter, width=int(width or 0), right=dot, auto=auto))
        start = text.find("%", pos)
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def parse_long_names(
    text: str, fields: dict[str, str], default_width: int, *, unknown: list[str]
) -> list[Field | str]:
    """squeue's and sinfo's ``-O``: ``JobArrayID,StateCompact:10,Reason:.5|`` → fields.

    ``fields`` maps lower-case names to the keys the rows are read by (the ``-o``
    letters). Each item is Slurm's ``type[:[.][size][suffix]]``: ``.`` right-aligns, no
    colon is ``default_width``, a colon without a size 0 (as is), and any text after the
    size (``|``, a space) is printed after the column, as is. Empty items (``a,,b``, an
    empty ``-O``) are nothing, as Slurm's ``strtok`` skips them. A name not in
    ``fields`` (a blank one, and one with spaces around it: ``'jobid, name'`` has
    `` name``) is added to ``unknown`` as written and dropped, its width with it, only
    its suffix printed, as Slurm 22.05.8's squeue and sinfo drop it
    (``format_add_invalid``) after saying ``Invalid job format specification: NAME``."""
    layout: list[Field | str] = []
    for item in text.split(","):
        if not item:
            continue
        name, colon, size = item.partition(":")
        key = fields.get(name.lower())  # (as written: Slurm knows no ' name')
        right = size.startswith(".")
        rest = size[1:] if right else size
        suffix = rest.lstrip("0123456789")
        digits = rest[: len(rest) - len(suffix)]
        if key is None:
            unknown.append(name)
        else:
            # (Slurm reads the size with strtol after a colon: ``Name:|`` is width 0)
            width = int(digits) if digits else 0 if colon else default_width
            layout.append(Field(key, width, right))
        if suffix:
            layout.append(suffix)
    return layout


def render_rows(
    layout: list[Field | str],
    titles: dict[str, str],
    rows: list[dict[str, str]],
    *,
    header: bool = True,
    uncut: Callable[[str, str], bool] | None = None,
    whole_titles: Container[str] = (),
) -> list[str]:
    """Lay out rows (letter → value) under ``layout``, with a title row first if ``header``
    (``render_columns``, of the rows' columns)."""
    letters = {part.letter for part in layout if isinstance(part, Field)}
    columns = {letter: [row.get(letter, "") for row in rows] for letter in letters}
    return render_columns(
        layout, titles, columns, len(rows), header=header, uncut=uncut, whole_titles=whole_titles
    )


class _Every:
    """A container of everything: ``render_columns``' default ``uncut_letters``."""

    def __contains__(self, item: object) -> bool:
        return True


_EVERY = _Every()


def render_columns(
    layout: list[Field | str],
    titles: dict[str, str],
    columns: dict[str, list[str]],
    count: int,
    *,
    header: bool = True,
    uncut: Callable[[str, str], bool] | None = None,
    whole_titles: Container[str] = (),
    uncut_letters: Container[str] = _EVERY,
) -> list[str]:
    """Lay out ``count`` rows given as columns (letter → each row's value; a letter
    missing: empty) under ``layout``, with a title row first if ``header``.

    ``auto`` widths (sinfo's ``%#P``) fit the widest value or title; the title counts even
    without ``header`` so columns do not shift when ``-h`` is given. A right-aligned value
    for which ``uncut(letter, value)`` holds is padded but not cut, as squeue prints node
    lists and durations (``%.5N``, ``%.2l``: Slurm 22.05.8's print.c passes them with
    cut_output false), nor is the title of a ``whole_titles`` letter (``NODELIST``, but
    ``REQ_NODES`` is cut); ``uncut`` is asked of ``uncut_letters``' values only (default:
    every letter's). Left-aligned columns cut every value.

    The rows are laid out by one ``%`` format of the whole line (``%18.18s``: padded
    and cut; ``%18s``: padded only), its arguments the columns zipped: no call a row or
    a value. A column whose values are cut or not by ``uncut`` has each distinct value
    (a queue of 100,000 jobs has few node lists and reasons) cut beforehand where it is
    cut, and is padded only.
    """
    empty = [""] * count
    widths: dict[int, int] = {}
    for index, part in enumerate(layout):
        if isinstance(part, Field) and part.auto:
            distinct = set(columns.get(part.letter, empty))
            widths[index] = max(len(c) for c in [*distinct, titles.get(part.letter, "")])
    lines = []
    if header:
        out = []
        for index, part in enumerate(layout):
            if isinstance(part, str):
                out.append(part)
            else:
                width, value = widths.get(index, part.width), titles.get(part.letter, "")
                if part.right and part.letter in whole_titles:
                    out.append(value.rjust(width))
                else:
                    out.append(cell(value, width, part.right))
        lines.append("".join(out))
    if not count:
        return lines
    specs: list[str] = []  # the line's format: literal text (``%`` doubled) and columns
    laid: list[list[str]] = []
    for index, part in enumerate(layout):
        if isinstance(part, str):
            specs.append(part.replace("%", "%%"))
            continue
        values = columns.get(part.letter, empty)
        width = widths.get(index, part.width)
        if width <= 0:
            specs.append("%s")
        elif part.right and uncut is not None and part.letter in uncut_letters:
            cut = {v: v if uncut(part.letter, v) else v[:width] for v in set(values)}
            values = list(map(cut.__getitem__, values))
            specs.append(f"%{width}s")
        else:
            specs.append(f"%{'' if part.right else '-'}{width}.{width}s")
        laid.append(values)
    if not laid:  # (no column: each line the literal text)
        lines.extend(["".join(part for part in layout if isinstance(part, str))] * count)
        return lines
    lines.extend(map("".join(specs).__mod__, zip(*laid, strict=True)))
    return lines


# -- Slurm's print_fields tables (sacct, sstat, sshare, sacctmgr) ------------------------
# ``Name%W`` picks a field and a width; a value too long for its column is cut with a
# ``+`` in its last place; a negative width left-aligns; ``-P`` ("plain") joins values
# with ``|``, ``-p`` ("trailing") ends each line with one too (src/common/print_fields.c,
# as remembered).


def parsable_mode(opts: Container[str]) -> str:
    """``-p`` → "trailing", ``-P`` → "plain", neither → "" (a table)."""
    return "trailing" if "parsable" in opts else "plain" if "parsable2" in opts else ""


def parse_print_fields(
    text: str,
    find: Callable[[str], T | None],
    width_of: Callable[[T], int],
    *,
    unknown: Callable[[str], str],
    signed: bool = False,
    exact: bool = False,
) -> list[tuple[T, int]]:
    """``JobID,JobName%30`` → (field, width) per name (``find`` looks a name up; none
    found: ``ValueError(unknown(name))``). ``%W`` sets the width: for sshare a positive W
    that keeps the default's alignment; ``signed`` (sacctmgr) as Slurm's atoi there, a
    negative W left-aligning and 0 keeping the default; ``exact`` (sacct, sstat) W as
    written, as Slurm 22.05.8's sacct: ``%20`` right-aligns, ``%-20`` left-aligns and
    ``%0`` is a column of no width (its values show only with -p/-P)."""
    columns: list[tuple[T, int]] = []
    for raw in text.split(","):
        item = raw.strip()
        name, _, width_text = item.partition("%")
        name = name.strip()
        if not name:
            continue
        found = find(name)
        if found is None:
            raise ValueError(unknown(name))
        width = width_of(found)
        if width_text and exact:
            import re  # (sacct's and sstat's: squeue, which imports this module, has none)

            if not re.fullmatch(r"-?\d+", width_text):
                raise ValueError(
                    f"Invalid field width in {item!r}: write a width, e.g. {name}%20 "
                    f"(right-aligned) or {name}%-20 (left-aligned)"
                )
            width = int(width_text)
        elif width_text and signed:
            try:
                width = int(width_text) or width
            except ValueError:
                raise ValueError(f"Bad field width in '{item}': write e.g. {name}%20") from None
        elif width_text:
            if not width_text.isdigit() or int(width_text) < 1:
                raise ValueError(
                    f"Invalid field width in {item!r}: write a positive width, e.g. {name}%20"
                )
            width = int(width_text) * (-1 if width < 0 else 1)
        columns.append((found, width))
    return columns


def fixed_cell(value: str, width: int) -> str:
    """One value in ``abs(width)`` places: right-aligned (left for a negative width),
    one too long cut with a ``+`` in its last place; nothing in none (sacct's ``%0``)."""
    size = abs(width)
    if size == 0:
        return ""
    if len(value) > size:
        value = value[: size - 1] + "+"
    return value.ljust(size) if width < 0 else value.rjust(size)


def _title_cell(title: str, width: int) -> str:
    """A sacct title: aligned as its column's values, cut to the width without a ``+``."""
    return fixed_cell(title[: abs(width)], width)


def print_fields(
    columns: Sequence[tuple[str, int]],
    rows: Iterable[Sequence[str]],
    *,
    header: bool,
    parsable: str = "",
    titles_as_values: bool = False,
    trailing_blank: bool = False,
    delimiter: str = "|",
) -> list[str]:
    """The lines of a table of ``columns`` (title, width) and ``rows`` (a value per
    column): fixed-width columns under a dashed rule, or ``delimiter``-separated
    (``parsable``, see ``parsable_mode``; sacct's ``--delimiter``). A title is
    right-aligned and cut to its width, unless ``titles_as_values`` (sacct's: aligned as
    the values are, cut without a ``+``: ``Nod``, as Slurm 22.05.8's sacct). Lines carry
    no trailing blanks unless ``trailing_blank`` (sacct's: a blank after every column)."""
    titles = [title for title, _ in columns]
    if parsable:
        tail = delimiter if parsable == "trailing" else ""
        lines = [delimiter.join(titles) + tail] if header else []
        return lines + [delimiter.join(row) + tail for row in rows]

    def line(cells: Iterable[str]) -> str:
        text = " ".join(cells)
        return text + " " if trailing_blank else text.rstrip()

    widths = [width for _, width in columns]
    lines = []
    if header:
        cut = _title_cell if titles_as_values else lambda t, w: t[: abs(w)].rjust(abs(w))
        lines.append(line(cut(t, w) for t, w in zip(titles, widths, strict=True)))
        lines.append(line("-" * abs(w) for w in widths))
    lines += [line(fixed_cell(v, w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return lines
