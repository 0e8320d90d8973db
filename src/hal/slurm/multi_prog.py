"""``srun --multi-prog CONF``: each task runs the program its rank's line names (MPMD).

A line is ``RANKS PROGRAM ARGS...``: ranks as ``0``, ``1-3``, ``4,6`` or ``*`` (every
rank no earlier line took). In the program and its arguments ``%t`` is the task's rank
and ``%o`` its offset among the line's ranks (``*``: the rank). A line whose first
non-blank character is ``#`` is a comment; blank lines are skipped. Words split at
blanks; single quotes keep blanks and ``%`` as written, a backslash keeps the next
character; double quotes are plain characters (as in Slurm 22.05.8, whose parsing and
messages these follow: docs/slurm-checks.md, srun). ``%`` before any other character
(or at a word's end) is dropped with it. Arguments after ``CONF`` on srun's command line
go after each task's own, unchanged.

Every rank of the step must have a line, or nothing starts: srun says which
(``Configuration file CONF invalid, no record for task id 2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hal.core.errors import InvalidRequest

Word = tuple[tuple[str, bool], ...]  # (text, True: "t" or "o", %t or %o to replace)


@dataclass(frozen=True, slots=True)
class ProgramLine:
    number: int  # in the file, from 1 (comments and blank lines counted)
    ranks: str  # as written: "0", "1-3,5", "*"
    words: tuple[Word, ...]  # the program and its arguments


@dataclass(frozen=True, slots=True)
class MultiProg:
    name: str  # the file as srun was given it, for messages
    lines: tuple[ProgramLine, ...]
    text: str = ""  # the file's, as read (what srun sends to the server)

    def highest_rank(self) -> int | None:
        """The highest rank a line names (srun's task count without -n is one more);
        None when only ``*`` lines name any."""
        found = [
            last for line in self.lines if line.ranks != "*" for _, last in _ranks(line, self.name)
        ]
        return max(found, default=None)

    def argv(self, ntasks: int, extra: Sequence[str] = ()) -> list[list[str]]:
        """Each rank's command line, ``extra`` appended; raises ``InvalidRequest`` with
        srun's lines for a bad or missing rank."""
        line_of: dict[int, tuple[ProgramLine, int]] = {}  # rank → its line, its offset
        for line in self.lines:
            if line.ranks == "*":  # the ranks not yet taken; %o is the rank itself
                for rank in range(ntasks):
                    line_of.setdefault(rank, (line, rank))
                continue
            offset = 0
            for first, last in _ranks(line, self.name):
                if last >= ntasks:
                    raise self._bad(line, f"Invalid task id, {last} >= ntasks")
                for rank in range(first, last + 1):
                    if rank in line_of:
                        raise self._bad(line, f"Duplicate record for task {rank}")
                    line_of[rank] = (line, offset)
                    offset += 1
        for rank in range(ntasks):
            if rank not in line_of:
                raise InvalidRequest(
                    f"Configuration file {self.name} invalid, no record for task id {rank}"
                )
        commands = []
        for rank in range(ntasks):
            line, offset = line_of[rank]
            words = [_expand(word, rank, offset) for word in line.words]
            commands.append([*words, *extra])
        return commands

    def _bad(self, line: ProgramLine, why: str) -> InvalidRequest:
        return InvalidRequest(
            f"{why}\nLine {line.number} of configuration file {self.name} invalid"
        )


def parse_multi_prog(text: str, name: str) -> MultiProg:
    """The file's lines; raises ``InvalidRequest`` for a line srun would refuse whatever
    the task count (a bad rank, no program)."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        ranks, *rest = stripped.split(None, 1)
        words = _words(rest[0] if rest else "")
        line = ProgramLine(number, ranks, tuple(words))
        if not words:
            raise InvalidRequest(f"Line {number} of configuration file {name} invalid")
        if ranks != "*":
            _ranks(line, name)  # its syntax, now
        lines.append(line)
    return MultiProg(name, tuple(lines), text)


def _ranks(line: ProgramLine, name: str) -> list[tuple[int, int]]:
    """The line's rank ranges, (first, last) as written."""
    found: list[tuple[int, int]] = []
    for part in line.ranks.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise InvalidRequest(
                f"Invalid task range specification ({line.ranks})\n"
                f"Line {line.number} of configuration file {name} invalid"
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise InvalidRequest(
                f"Invalid task range, {first}-{last}\n"
                f"Line {line.number} of configuration file {name} invalid"
            )
        found.append((first, last))
    return found


def _words(text: str) -> list[Word]:
    """Split at blanks, in one pass as Slurm's srun does: single quotes and backslashes
    keep what they hold as written; an unquoted ``%`` takes the next character with it
    (a blank too), kept only as ``%t`` or ``%o``."""
    words: list[Word] = []
    parts: list[tuple[str, bool]] = []
    started = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            if started:
                words.append(tuple(parts))
                parts, started = [], False
        elif ch == "'":
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            parts.append((text[i + 1 : end], False))
            started, i = True, end
        elif ch == "\\" and i + 1 < len(text):
            parts.append((text[i + 1], False))
            started, i = True, i + 1
        elif ch == "%":
            if text[i + 1 : i + 2] in ("t", "o"):
                parts.append((text[i + 1], True))
            started, i = True, i + 1
        else:
            parts.append((ch, False))
            started = True
        i += 1
    if started:
        words.append(tuple(parts))
    return words


def _expand(word: Word, rank: int, offset: int) -> str:
    return "".join(
        (str(rank) if text == "t" else str(offset)) if placeholder else text
        for text, placeholder in word
    )
