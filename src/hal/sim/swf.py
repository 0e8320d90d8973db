"""Standard Workload Format (SWF) files: read and write all 18 fields, ``.swf`` or
``.swf.gz`` (read as gzip by content, whatever the name).

The edge between trace files and HAL: lines become ``SwfRecord`` values exactly as
written (``-1`` stays ``-1``); cleaning and conversion to jobs happen in ``workload``.
Header lines (``; Key: value``) are kept in order; ``MaxProcs``/``MaxNodes`` are read as
the machine size.
"""

from __future__ import annotations

import gzip
import io
import math
import warnings
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from hal.core.errors import InvalidRequest

FIELDS = (
    "job",
    "submit",
    "wait",
    "run",
    "procs_alloc",
    "cpu_avg",
    "mem_used",
    "procs_req",
    "time_req",
    "mem_req",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)


class SwfError(InvalidRequest):
    """A trace file could not be read; the message names the file and line."""

    code = "invalid_trace"


@dataclass(frozen=True, slots=True)
class SwfRecord:
    """One job line. Times in seconds, ``-1`` = unknown (the format's own convention)."""

    job: int
    submit: float
    wait: float
    run: float
    procs_alloc: int
    cpu_avg: float
    mem_used: float
    procs_req: int
    time_req: float
    mem_req: float
    status: int
    user: int
    group: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: float


@dataclass(slots=True)
class SwfHeader:
    """Header comments in file order, as (key, value); free text has key ``""``."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        for k, v in self.lines:
            if k.lower() == key.lower():
                return v
        return None

    def get_int(self, key: str) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        try:
            return int(value.split()[0])
        except (ValueError, IndexError):
            return None

    @property
    def machine_procs(self) -> int | None:
        """MaxProcs, else MaxNodes (the archive's convention); a count below 1 (-1:
        unknown) is no size."""
        for key in ("MaxProcs", "MaxNodes"):
            count = self.get_int(key)
            if count is not None and count > 0:
                return count
        return None


_INT_FIELDS = {0, 4, 7, 10, 11, 12, 13, 14, 15, 16}


_GZIP_MAGIC = b"\x1f\x8b"


def _open(path: Path) -> IO[str]:
    """The file as text, gunzipped when its first bytes say gzip (whatever its name);
    a byte order mark is dropped."""
    with path.open("rb") as fh:
        packed = fh.read(2) == _GZIP_MAGIC
    if packed:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="replace")
    return path.open(encoding="utf-8-sig", errors="replace")


_INT_LIMIT = 2.0**53  # a count or number beyond this is no integer a float holds exactly


def _parse(line: str, where: str) -> SwfRecord:
    parts = line.split()
    if len(parts) != 18:
        raise SwfError(f"{where}: expected 18 fields, found {len(parts)}; is this an SWF file?")
    vals: list[float | int] = []
    for i, word in enumerate(parts):
        try:  # as numpy reads it: no digit separators, which float() would take
            value = math.nan if "_" in word else float(word)
        except ValueError:
            value = math.nan
        if not _valid(value, i):
            raise SwfError(
                f"{where}: field {i + 1} ({FIELDS[i]}) is {word!r}, not a finite number"
                " (SWF fields are numbers, -1 when unknown)",
                field=FIELDS[i],
            )
        vals.append(int(value) if i in _INT_FIELDS else value)
    return SwfRecord(*vals)  # type: ignore[arg-type]


def _valid(value: float, index: int) -> bool:
    return math.isfinite(value) and (index not in _INT_FIELDS or abs(value) < _INT_LIMIT)


def read_swf(path: str | Path) -> tuple[SwfHeader, list[SwfRecord]]:
    """The header and every job line of ``path`` (``.swf`` or ``.swf.gz``)."""
    header, table = read_swf_table(path)
    return header, list(records_of(table, range(len(table))))


def read_swf_table(path: str | Path) -> tuple[SwfHeader, np.ndarray]:
    """The header and the job lines as one float table (a row per line, file order,
    the 18 fields as columns): ``records_of`` makes records of the rows wanted, so a
    caller that needs a few thousand jobs of a long trace builds only those."""
    path = Path(path)
    header = SwfHeader()
    lines: list[tuple[int, str]] = []
    n = 0
    try:
        with _open(path) as fh:
            for n, raw in enumerate(fh, start=1):
                line = raw.strip()
                if not line:
                    continue
                if line.startswith(";"):
                    text = line[1:].strip()
                    key, sep, value = text.partition(":")
                    if sep and key and " " not in key.strip():
                        header.lines.append((key.strip(), value.strip()))
                    else:
                        header.lines.append(("", text))
                    continue
                lines.append((n, line))
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise SwfError(
            f"cannot read trace {path}: the compressed file is truncated or corrupt after"
            f" line {n} ({err})"
        ) from err
    except OSError as err:
        raise SwfError(f"cannot read trace {path}: {err.strerror or err}") from err
    return header, _table(lines, path)


def _table(lines: list[tuple[int, str]], path: Path) -> np.ndarray:
    """Parse all job lines at once (one numpy conversion: 300,000 lines in about a
    second); fall back to line by line to name the first bad line."""
    if not lines:
        return np.empty((0, 18))
    try:  # a word that is no number: a ValueError (NumPy 2.3+) or a warning, found below
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            values = np.fromstring(" ".join(line for _, line in lines), sep=" ")
    except (ValueError, DeprecationWarning):
        values = np.empty(0)
    # The count per line, not only in all: a 17-field line then a 19-field one are two
    # broken lines, not two jobs with their fields shifted.
    if (
        values.size != 18 * len(lines)
        or any(len(line.split()) != 18 for _, line in lines)
        or not _all_valid(values.reshape(len(lines), 18))
    ):
        for n, line in lines:
            _parse(line, f"{path}:{n}")
        raise SwfError(f"{path}: expected 18 fields on each job line")
    return values.reshape(len(lines), 18)


def _all_valid(table: np.ndarray) -> bool:
    """Every number finite (``nan``/``inf`` parse, but are no time or count) and every
    integer field within what ``records_of``'s conversion keeps exact."""
    ints = table[:, sorted(_INT_FIELDS)]
    return bool(np.isfinite(table).all() and (np.abs(ints) < _INT_LIMIT).all())


def records_of(table: np.ndarray, rows: Sequence[int] | np.ndarray) -> Iterator[SwfRecord]:
    """The records of ``rows`` of a ``read_swf_table`` table, in that order, made in
    chunks as they are consumed."""
    for start in range(0, len(rows), _CHUNK):
        part = table[np.asarray(rows[start : start + _CHUNK], dtype=np.intp)]
        columns = [
            part[:, k].astype(np.int64).tolist() if k in _INT_FIELDS else part[:, k].tolist()
            for k in range(18)
        ]
        yield from map(SwfRecord, *columns)


_CHUNK = 4096


def _fmt(value: float | int) -> str:
    """Whole numbers as integers; others with two decimals as the archive writes them
    (``257.50``) or, where two lose a fraction the value has, to the microsecond
    (10.333 s had read back as 10.33)."""
    if float(value).is_integer():
        return str(int(value))
    if round(value, 2) == value:
        return f"{value:.2f}"
    return f"{value:.6f}".rstrip("0")


def format_records(records: Iterable[SwfRecord]) -> Iterator[str]:
    for rec in records:
        yield " ".join(_fmt(v) for v in astuple(rec))


def write_swf(path: str | Path, header: SwfHeader, records: Iterable[SwfRecord]) -> None:
    """Write an SWF file (gzip-compressed when ``path`` ends in ``.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        for key, value in header.lines:
            out.write(f"; {key}: {value}\n" if key else f"; {value}\n")
        for line in format_records(records):
            out.write(line + "\n")
