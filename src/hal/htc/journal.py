"""``Journal``: the optional append-only file of a recoverable session (``journal=True``).

One file per session, ``<journal dir>/<session id>.journal``, of the broker's own
length-prefixed msgpack frames:

    ["S", {id, user, options, created, key, worker_key}]   once, first
    ["T", [id, payload, ...]]                               tasks accepted (a SUBMIT)
    ["R", [id, status, payload, ...]]                       final outcomes, in delivery order
    ["A", seq]                                              the client acknowledged up to seq
    ["M", common]                                           the session's common data
    ["C"]                                                   the client closed the session
    ["X", [id, ...]]                                        tasks the client cancelled

Records are buffered and written once per broker loop turn, before that turn's results go
to the client, so a result the client has seen is always in the file. Writes are not
fsynced: the journal survives the broker process dying (the OS has the data), not the
machine. A broker that starts finds the journals of sessions that were open, reopens
those sessions with their unfinished tasks queued again (delivered outcomes are not
re-run; unacknowledged ones are kept for the client's reattach) and appends on. The file
is removed when the session ends.
"""

from __future__ import annotations

import io
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy.engine import make_url

from hal.db import normalise_url
from hal.htc import protocol as p
from hal.htc.rest import SessionOptions
from hal.htc.session import Session
from hal.htc.tasks import TaskBook

SUFFIX = ".journal"


def default_dir(db_url: str) -> str:
    """``HAL_HTC_JOURNAL_DIR``, else ``htc-journal`` next to a SQLite database (the
    server's data directory); "" (journals refused) for another database."""
    explicit = os.environ.get("HAL_HTC_JOURNAL_DIR", "")
    if explicit:
        return explicit
    url = make_url(normalise_url(db_url))
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return str(Path(url.database).resolve().parent / "htc-journal")
    return ""


class Journal:
    def __init__(self, path: Path, *, truncate_to: int | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)  # holds the session's key
        if truncate_to is not None:
            os.ftruncate(fd, truncate_to)  # drop a frame torn by a killed broker
        os.lseek(fd, 0, os.SEEK_END)
        self._file = os.fdopen(fd, "wb")
        self._buffer: list[bytes] = []

    def append(self, record: list[Any]) -> None:
        self._buffer.append(p.frame(record))

    def flush(self) -> None:
        if self._buffer:
            self._file.write(b"".join(self._buffer))
            self._file.flush()
            self._buffer.clear()

    def close(self) -> None:
        self.flush()
        self._file.close()

    def remove(self) -> None:
        self._buffer.clear()
        self._file.close()
        self.path.unlink(missing_ok=True)


def create(directory: str, session: Session) -> Journal:
    journal = Journal(Path(directory) / f"{session.id}{SUFFIX}")
    journal.append(
        [
            "S",
            {
                "id": session.id,
                "user": session.user,
                "options": session.options.model_dump(),
                "created": session.created,
                "key": session.key,
                "worker_key": session.worker_key,
            },
        ]
    )
    journal.flush()
    return journal


@dataclass
class Replay:
    """What a journal file says about its session."""

    meta: dict[str, Any]
    tasks: dict[int, bytes] = field(default_factory=dict)  # accepted, no outcome yet
    outcomes: list[Any] = field(default_factory=list)  # flat, in delivery order
    acked: int = 0
    submitted: int = 0
    completed: int = 0
    failed: int = 0
    next_task_id: int = 1
    common: bytes | None = None
    closed: bool = False
    good_bytes: int = 0  # length of the intact frames (a torn tail is dropped)


def read(path: Path) -> Replay | None:
    """Replay one journal; None when it has no session header (nothing to recover)."""
    data = path.read_bytes()
    stream: BinaryIO = io.BytesIO(data)
    replay: Replay | None = None
    while True:
        try:
            record = p.read_frame(stream)
        except Exception:  # a torn or garbled tail: keep what came before it
            break
        if record is None:
            break
        kind = record[0]
        if replay is None:
            if kind != "S":
                return None
            replay = Replay(meta=dict(record[1]))
        elif kind == "T":
            flat = record[1]
            for i in range(0, len(flat) - 1, 2):
                replay.tasks[int(flat[i])] = bytes(flat[i + 1])
            replay.submitted += len(flat) // 2
            if flat:
                replay.next_task_id = max(replay.next_task_id, int(flat[-2]) + 1)
        elif kind == "R":
            flat = record[1]
            for i in range(0, len(flat) - 2, 3):
                replay.tasks.pop(int(flat[i]), None)
                if flat[i + 1] == p.OK:
                    replay.completed += 1
                else:
                    replay.failed += 1
            replay.outcomes += flat
        elif kind == "X":
            for task_id in record[1]:
                replay.tasks.pop(int(task_id), None)
        elif kind == "A":
            replay.acked = max(replay.acked, int(record[1]))
        elif kind == "M":
            replay.common = bytes(record[1])
        elif kind == "C":
            replay.closed = True
        replay.good_bytes = stream.tell()
    return replay


def restore(replay: Replay, now: float) -> Session:
    """The session as it was: unfinished tasks queued again (oldest first), outcomes the
    client has not acknowledged kept for its reattach."""
    meta = replay.meta
    options = SessionOptions.model_validate(meta["options"])
    book = TaskBook(retries=options.retries, max_worker_deaths=options.max_worker_deaths)
    book.backlog = deque(replay.tasks.items())
    book.live.update(replay.tasks)
    c = book.counters
    c.submitted, c.completed, c.failed = replay.submitted, replay.completed, replay.failed
    session = Session(
        id=str(meta["id"]),
        user=str(meta["user"]),
        options=options,
        created=float(meta["created"]),
        key=str(meta["key"]),
        worker_key=str(meta["worker_key"]),
        state="CLOSED" if replay.closed else "OPEN",
        book=book,
        common=replay.common,
        next_task_id=replay.next_task_id,
        # its service answered before (a failure here may also be a poison task's)
        answered=replay.completed > 0,
    )
    session.last_activity = now
    acked = min(replay.acked, len(replay.outcomes) // 3)
    session.sent_seq = session.acked_seq = acked
    # the results the client may not have: unacknowledged again, as ``flush`` leaves sent
    # ones (no client yet: nothing is sent until it reattaches)
    session.outbox = replay.outcomes[3 * acked :]
    session.flush()
    return session


def recover(directory: str, now: float) -> list[tuple[Session, Journal]]:
    """Every journaled session left by an earlier broker, reopened for appending."""
    found: list[tuple[Session, Journal]] = []
    root = Path(directory)
    if not directory or not root.is_dir():
        return found
    for path in sorted(root.glob(f"*{SUFFIX}")):
        replay = read(path)
        if replay is None:
            path.unlink(missing_ok=True)
            continue
        found.append((restore(replay, now), Journal(path, truncate_to=replay.good_bytes)))
    return found
