"""Control requests to the broker from the control plane's ``/v1/htc`` routes.

The api layer authenticates users over REST and then asks the broker, over the broker's
own TCP port, with a key only the control plane knows (``CONTROL [key, op, args]``).
Answers are ``REPLY [ok, data]``; on failure ``data`` is ``{"code", "message"}`` with a
``HalError`` code the router re-raises.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from hal.htc import journal
from hal.htc import protocol as p
from hal.htc.rest import SessionInfo, SessionOptions, WorkerInfo
from hal.htc.session import Session
from hal.htc.tasks import TaskBook

if TYPE_CHECKING:
    from hal.htc.broker import Broker


class ControlError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ControlOps:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def handle(self, message: list[Any]) -> list[Any]:
        _, key, op, args = message[:4]
        if not self.broker.control_key or not secrets.compare_digest(
            str(key), self.broker.control_key
        ):
            return [p.REPLY, False, {"code": "permission_denied", "message": "bad control key"}]
        method = getattr(self, "op_" + str(op), None)
        if method is None:
            return [p.REPLY, False, {"code": "invalid_request", "message": f"no op {op}"}]
        try:
            return [p.REPLY, True, method(args)]
        except ControlError as err:
            return [p.REPLY, False, {"code": err.code, "message": err.message}]

    def _owned(self, args: dict[str, Any]) -> Session:
        session = self.broker.sessions.get(str(args.get("session")))
        if session is None:
            raise ControlError(
                "not_found", f"no live session {args.get('session')}; `hal htc sessions` lists them"
            )
        if not args.get("admin") and session.user != args.get("user"):
            raise ControlError(
                "permission_denied", f"session {session.id} belongs to {session.user}"
            )
        return session

    def op_open(self, args: dict[str, Any]) -> dict[str, Any]:
        b = self.broker
        options = SessionOptions.model_validate(args["options"])
        session_id = "s" + secrets.token_hex(6)
        session = Session(
            id=session_id,
            user=str(args["user"]),
            options=options,
            created=b.wall(),
            book=TaskBook(retries=options.retries, max_worker_deaths=options.max_worker_deaths),
        )
        session.last_activity = b.clock()
        session.clientless_since = b.clock()  # its client connects next (or is reaped)
        if options.journal:
            if not b.journal_dir:
                raise ControlError(
                    "invalid_request",
                    "this server has no HTC journal directory (set HAL_HTC_JOURNAL_DIR)",
                )
            session.journal = journal.create(b.journal_dir, session)
        b.sessions[session_id] = session
        b.totals.sessions_opened += 1
        b.persist(session, insert=True)
        return {"session": session_id, "key": session.key, "broker": b.address}

    def op_attach(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self._owned(args)
        return {"session": session.id, "key": session.key, "broker": self.broker.address}

    def op_cancel(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self._owned(args)
        if not session.live:
            raise ControlError(
                "conflict", f"session {session.id} already ended {session.state}; nothing to cancel"
            )
        self.broker.end(session, "CANCELLED", f"cancelled by {args.get('user')}")
        return session_info(session).model_dump()

    def op_list(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        user = args.get("user")
        return [
            session_info(s, workers=False).model_dump()
            for s in self.broker.sessions.values()
            if user is None or s.user == user
        ]

    def op_show(self, args: dict[str, Any]) -> dict[str, Any]:
        session = self.broker.sessions.get(str(args.get("session")))
        if session is None:
            raise ControlError("not_found", f"no live session {args.get('session')}")
        return session_info(session).model_dump()


def session_info(s: Session, *, workers: bool = True) -> SessionInfo:
    c = s.book.counters
    o = s.options
    return SessionInfo(
        id=s.id,
        name=o.name,
        user=s.user,
        service=o.service.label(),
        state=s.state,
        reason=s.reason,
        priority=o.priority,
        min_workers=o.min_workers,
        max_workers=o.max_workers,
        created=s.created,
        ended=s.ended,
        submitted=c.submitted,
        completed=c.completed,
        failed=c.failed,
        retried=c.retried,
        worker_deaths=c.worker_deaths,
        backlog=s.book.waiting,
        in_flight=s.book.in_flight_count,
        rate_per_second=round(s.rate, 1),
        client_attached=s.client is not None,
        target_workers=s.target_workers,
        journal=o.journal,
        workers=[
            WorkerInfo(
                job_id=w.job_id,
                host=w.host,
                pid=w.pid,
                state=w.state,
                in_flight=s.book.load(w.job_id),
            )
            for w in s.workers.values()
        ]
        if workers
        else [],
    )
