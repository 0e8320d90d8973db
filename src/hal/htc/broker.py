"""The HTC broker: sessions, their task queues and their warm workers, in one process.

    client --SUBMIT--> broker --TASKS--> worker      (batched frames, msgpack)
    client <-RESULTS-- broker <-RESULTS- worker
                          |  WorkerSync (HTTP, ~1/s)
                          v
                    control plane: worker jobs on agents

The broker runs as its own process, started by the control plane (``process.py``): the
task data path is a hot Python loop, and inside the control plane it would hold the GIL
against REST requests and agent syncs. It is single-threaded asyncio (uvloop when
installed); a database thread writes session metadata.

Dispatch is batched per loop turn: every event that may allow work (tasks arrive,
results arrive, a worker gets ready) marks its session, and once per turn each marked
session fills its workers' windows and flushes its results to the client in one frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hal.htc import journal
from hal.htc import protocol as p
from hal.htc.broker_control import ControlOps
from hal.htc.controlplane import ControlPlane
from hal.htc.fairshare import ReleasePolicy
from hal.htc.pool import MAX_START_FAILURES, plan_pool, worker_launch, worker_time_limit
from hal.htc.records import SessionRecords
from hal.htc.rest import WorkerSync
from hal.htc.session import Session, Worker
from hal.htc.stats import BrokerTotals, snapshot

log = logging.getLogger("hal.htc.broker")

POOL_INTERVAL_S = 0.25
RECORD_INTERVAL_S = 5.0
ENDED_RETENTION_S = 600.0  # ended sessions stay reattachable (unacked results) this long
CANCELLED_KEPT = 4096  # worker jobs remembered as cancelled before they connected
# A session whose client went away without detaching (killed, crashed, its host gone) is
# ended after this long with no client. Clients do not reconnect by themselves: a person
# or a supervisor restarts the program and it reattaches by id (``HtcClient.attach``),
# which takes minutes, not seconds; a vanished host is itself found only after about a
# minute of TCP keepalive (``protocol.KEEPALIVE_*``). Until then its workers hold CPUs.
CLIENT_GRACE_S = 300.0
# A worker that died running a task about to be failed as poison: the verdict waits this
# long at most for the control plane to report how its job ended (out of memory, its time
# limit), so that the error can say so. Other deaths are handled at once.
VERDICT_WAIT_S = 10.0
# A worker job whose process died (its keeper starts it again, ``keeper.py``) that has
# not reconnected after this long is cancelled and replaced.
RESTART_WAIT_S = 60.0
# What a worker job's end state says about its death, for the poison verdict:
# (cause, advice); ``{memory}`` and ``{limit}`` are filled in from the session's options.
JOB_END_CAUSES = {
    "OUT_OF_MEMORY": (
        "the worker job ran out of memory: memory_per_worker={memory}",
        "Give the workers more memory (memory_per_worker) or make the task use less",
    ),
    "TIMEOUT": (
        "the worker job reached its time limit (worker_lease + {margin} s = {limit} s)",
        "A task must end within its worker job's time limit: raise worker_lease above "
        "the task's length, or split the task",
    ),
}


class Peer(asyncio.Protocol):
    """One TCP connection: a client, a worker or the control plane."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.decoder = p.FrameDecoder()
        self.transport: Any = None  # asyncio's or uvloop's transport
        self.session: Session | None = None
        self.worker: Worker | None = None
        self.role = ""
        # the session a client detached from: its ACKs of results sent before DETACHED
        # still count (else the next attach would get those results a second time)
        self.detached: Session | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(6, 1, 1)  # IPPROTO_TCP, TCP_NODELAY: no Nagle delay
                # a worker whose host vanished is found lost and its tasks rerun
                # elsewhere, rather than wait on a dead connection
                p.keep_alive(sock, bound_unacked=False)

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.decoder.feed(data)
            for message in messages:
                self.broker.on_message(self, message)
        except Exception as err:  # a broken peer must not take the broker down
            log.warning("closing a connection that sent a bad frame: %s", err)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.broker.on_lost(self)

    def send(self, message: list[Any]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(p.frame(message))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Broker:
    def __init__(
        self,
        *,
        address: str = "",
        control_key: str = "",
        control_plane: ControlPlane | None = None,
        records: SessionRecords | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        pool_size: int = 0,
        journal_dir: str = "",
        client_grace: float = CLIENT_GRACE_S,
    ) -> None:
        self.address = address  # HOST:PORT workers and clients connect to
        self.control_key = control_key
        self.control_plane = control_plane
        self.records = records
        self.clock = clock
        self.wall = wall
        self.pool_size = pool_size  # workers in all; 0 = the cluster's CPU count
        self.journal_dir = journal_dir  # where recoverable sessions keep journals ("": none)
        self.client_grace = client_grace  # seconds a session waits for a lost client's return
        self.sessions: dict[str, Session] = {}
        self.policy = ReleasePolicy()
        self.control = ControlOps(self)
        self._dirty: set[Session] = set()
        self._scheduled = False
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="htc-db")
        self._manual_ids = 0
        self._cancel_jobs: list[int] = []
        # worker jobs cancelled before they connected (most recent): one that connects
        # before its cancel lands is stopped, not given tasks that would die with it
        self._cancelled: dict[int, None] = {}
        self._capacity_cpus = 0
        self.totals = BrokerTotals()  # aggregate counters for the control plane's /metrics

    def close(self) -> None:
        """Wait for queued metadata writes (call once the loop has stopped serving)."""
        self._db.shutdown(wait=True)

    def recover(self) -> list[str]:
        """Reopen the journaled sessions an earlier broker left open; returns their ids."""
        for session, file in journal.recover(self.journal_dir, self.clock()):
            session.journal = file
            self.sessions[session.id] = session
            self.mark(session)  # a closed session with nothing left ends DONE at once
        return [s.id for s in self.sessions.values() if s.journal is not None]

    def suspend(self) -> None:
        """Broker shutdown: journaled sessions stay open for the next broker (their
        workers are released); the others end LOST."""
        for session in list(self.sessions.values()):
            if session.journal is not None and session.live:
                for worker in list(session.workers.values()):
                    self.release(session, worker)
                session.journal.close()
                session.journal = None
                session.suspended = True
                # Nothing is recorded from here on, so nothing may reach the client: a
                # result it saw must be in the journal, or the next broker reruns the task
                # and its sequence numbers no longer match the client's. It reattaches.
                if session.client is not None:
                    session.client.close()
                    session.client = None
            else:
                self.end(session, "LOST", "the HTC broker stopped")

    # -- connections ------------------------------------------------------------------
    def on_message(self, peer: Peer, message: list[Any]) -> None:
        kind = message[0]
        session = peer.session
        # A worker's messages count only from its current connection, not one it replaced.
        worker = peer.worker if peer.worker is not None and peer.worker.conn is peer else None
        if kind == p.SUBMIT and session is not None and peer.role == "client":
            refused = submit_refusal(session, message[1])
            if refused:
                peer.send([p.ERROR, refused])
            else:
                self.submit(session, message[1])
        elif kind == p.RESULTS and worker is not None and session is not None:
            self.results(session, worker, message[2])
        elif kind == p.ACK and peer.role == "client" and (session or peer.detached):
            session = session if session is not None else peer.detached
            assert session is not None  # (for the type checker: the condition above)
            was_paused = session.paused
            session.ack(int(message[1]))
            if session.journal is not None:
                session.journal.append(["A", session.acked_seq])
                self.mark(session)
            elif was_paused and not session.paused:
                self.mark(session)
        elif kind == p.HELLO_CLIENT:
            self.hello_client(peer, str(message[1]), str(message[2]))
        elif kind == p.HELLO_WORKER:
            self.hello_worker(peer, message)
        elif kind == p.WELCOME and worker is not None and session is not None:
            # Only a loading worker becomes ready: one released while it loaded has been
            # sent STOP, and tasks sent after that would die with it (and be blamed on it).
            if worker.state == "loading":
                worker.state = "ready"
                worker.ready_at = worker.ready_at or self.clock()  # a restart keeps its lease
            self.mark(session)
        elif kind == p.LOAD_ERROR and worker is not None and session is not None:
            self.load_error(session, worker, str(message[1]))
        elif kind == p.SERVICE_EXITED and worker is not None and session is not None:
            self.service_exited(session, worker, str(message[1]))
        elif kind == p.COMMON and session is not None and peer.role == "client":
            session.common = bytes(message[1])
            if session.journal is not None:
                session.journal.append(["M", session.common])
                self.mark(session)
            for worker in session.workers.values():
                if worker.state == "loading" and worker.conn is not None:
                    self.send_init(session, worker)
        elif kind == p.CLOSE and session is not None and peer.role == "client":
            if session.state == "OPEN":
                session.state = "CLOSED"
                if session.journal is not None:
                    session.journal.append(["C"])
            self.mark(session)
        elif kind == p.CANCEL and session is not None and peer.role == "client":
            peer.send([p.CANCEL, self.withdraw(session, message[1])])
        elif kind == p.CANCEL_SESSION and session is not None and peer.role == "client":
            self.end(session, "CANCELLED", str(message[1]) or "cancelled by its client")
        elif kind == p.DETACH and session is not None and peer.role == "client":
            session.client = None
            session.detached = True  # on purpose: it runs on without a client (no reaping)
            peer.session, peer.detached = None, session
            peer.send([p.DETACHED])
        elif kind == p.CONTROL:
            peer.role = "control"
            peer.send(self.control.handle(message))
        else:
            peer.send([p.ERROR, f"unexpected message kind {kind} from this connection"])

    def on_lost(self, peer: Peer) -> None:
        session, worker = peer.session, peer.worker
        if session is None:
            return
        if peer.role == "client" and session.client is peer:
            session.client = None
            session.clientless_since = self.clock()  # reaped after the grace (``reap``)
        if worker is not None and worker.conn is peer:
            self.on_worker_lost(session, worker)

    def on_worker_lost(self, session: Session, worker: Worker) -> None:
        """A worker's connection ended. When that fails its task as poison, the verdict
        waits for the control plane to say how its job ended (``pool_round``, at most
        ``VERDICT_WAIT_S``): a job killed for its memory or its time limit is reported
        as such, not as a task that crashes the process. Otherwise at once."""
        if (
            worker.job_id > 0
            and self.control_plane is not None
            and session.live
            and not worker.note  # (it said why: its service program exited)
            and session.book.would_poison(worker.job_id)
        ):
            worker.conn = None
            worker.state = "lost"
            worker.lost_at = self.clock()
            return
        self.worker_gone(session, worker)

    def worker_gone(self, session: Session, worker: Worker, ended: str = "") -> None:
        """``worker``'s connection is over: the tasks it held go back to the queue (as
        suspects, see ``TaskBook.worker_lost``). ``ended``: its job's end state, when
        known."""
        why = f"job {worker.job_id} on {worker.host or '?'} (pid {worker.pid})"
        cause, advice = JOB_END_CAUSES.get(ended, ("", ""))
        if cause:
            o = session.options
            memory = o.memory_per_worker_bytes
            cause = cause.format(
                memory=f"{memory / 2**20:g} MiB" if memory else "not set",
                margin=worker_time_limit(0),
                limit=worker_time_limit(o.worker_lease_seconds),
            )
        elif worker.note:
            cause = worker.note
        if cause:
            why += f": {cause}"
        was = worker.state
        worker.conn = None
        if ended:
            self.forget(session, worker)
        elif worker.keeper and was in ("ready", "lost") and session.live:
            worker.state = "restarting"  # its job's keeper starts its process again
            worker.lost_at = self.clock()
        else:
            self.leaving(session, worker)
        retried = session.book.counters.retried
        lost = session.book.worker_lost(worker.job_id, why, advice)
        self.totals.tasks_retried += session.book.counters.retried - retried
        if lost:
            self.totals.count_outcomes(lost)
            if session.journal is not None:
                session.journal.append(["R", lost])
        session.outbox += lost
        self.mark(session)
        if not session.live or was == "draining":
            return
        if was == "loading":  # its process died loading the service (an import crashed)
            self.start_failed(session, f"the worker died while loading the service: {why}")
        else:
            self.totals.worker_failures["lost"] += 1

    def leaving(self, session: Session, worker: Worker) -> None:
        """``worker``'s job is ending: its record stays, counted against max_workers,
        until the control plane reports the end (``pool_round``). One the control plane
        does not watch (none, or a worker started by hand) goes at once."""
        if worker.job_id > 0 and self.control_plane is not None:
            worker.state = "exiting"
        else:
            self.forget(session, worker)

    def forget(self, session: Session, worker: Worker) -> None:
        if session.workers.get(worker.job_id) is worker:
            del session.workers[worker.job_id]
        worker.conn = None
        worker.state = "gone"

    def hello_client(self, peer: Peer, session_id: str, key: str) -> None:
        session = self.sessions.get(session_id)
        if session is None or not secrets.compare_digest(session.key, key):
            peer.send([p.ERROR, f"no session {session_id} with this key on this broker"])
            peer.close()
            return
        if session.suspended:
            peer.send([p.ERROR, f"the HTC broker is stopping; reattach to {session_id} soon"])
            peer.close()
            return
        if session.client is not None and session.client is not peer:
            session.client.close()  # the newest attachment wins
        peer.role = "client"
        peer.session = session
        session.client = peer
        session.clientless_since = None
        # Results gathered this loop turn are in neither count until the turn's flush,
        # which sends them to this client: count them, or it stops waiting too early.
        outstanding = session.book.unfinished + session.unacked_results + len(session.outbox) // 3
        peer.send(
            [
                p.WELCOME,
                {
                    "session": session.id,
                    "state": session.state,
                    "reason": session.reason,
                    "next_task_id": session.next_task_id,
                    "outstanding": outstanding,
                    # the client detaches rather than cancels when its block raises
                    "survives_client": session.survives_client,
                    # "exec": the client refuses a task argument that is not bytes or str
                    "service_kind": session.options.service.kind,
                },
            ]
        )
        session.resend()
        if not session.live:
            peer.send([p.ENDED, session.state, session.reason])

    def hello_worker(self, peer: Peer, message: list[Any]) -> None:
        _, session_id, key, job_id, host, pid = message[:6]
        # {"keeper": its job restarts its process, "died": how the last one ended}
        extra = message[6] if len(message) > 6 and isinstance(message[6], dict) else {}
        session = self.sessions.get(str(session_id))
        if session is None or not secrets.compare_digest(session.worker_key, str(key)):
            peer.send([p.ERROR, f"no session {session_id} with this worker key"])
            peer.close()
            return
        job_id = int(job_id)
        if not session.live or job_id in self._cancelled:
            peer.send([p.STOP])
            peer.close()
            return
        if job_id == 0:  # started by hand, not as a HAL job
            self._manual_ids -= 1
            job_id = self._manual_ids
        worker = session.workers.get(job_id)
        if worker is not None and (worker.state == "lost" or worker.conn is not None):
            # The job's last process is over: lost, its verdict need not wait for the
            # job's end (it says how it died); still connected, this is a second start in
            # one job, and the tasks sent on the first would wait forever for results
            # only the first can send. Its tasks go back and that connection ends.
            old = worker.conn
            worker.note = worker.note or str(extra.get("died", ""))
            self.worker_gone(session, worker)
            if old is not None:
                old.close()
            worker = session.workers.get(job_id)
        if worker is not None and worker.state not in ("pending", "restarting"):
            peer.send([p.STOP])  # its job is ending (released, drained, failed to start)
            peer.close()
            return
        if worker is None:
            worker = Worker(job_id=job_id, session=session.id)
            session.workers[job_id] = worker
        worker.conn, worker.host, worker.pid = peer, str(host), int(pid)
        worker.keeper = bool(extra.get("keeper"))
        worker.state, worker.note = "loading", ""
        peer.role, peer.session, peer.worker = "worker", session, worker
        if session.common is not None or not session.options.has_common_data:
            self.send_init(session, worker)  # else INIT waits for the client's COMMON

    def _cancel_job(self, job_id: int) -> None:
        self._cancel_jobs.append(job_id)
        self._cancelled[job_id] = None
        if len(self._cancelled) > CANCELLED_KEPT:
            del self._cancelled[next(iter(self._cancelled))]

    def send_init(self, session: Session, worker: Worker) -> None:
        if worker.conn is None:
            return
        o = session.options
        spec = o.service.model_dump()
        worker.conn.send([p.INIT, spec, session.common, o.task_timeout_seconds, o.workdir])

    def load_error(self, session: Session, worker: Worker, message: str) -> None:
        session.start_failures += 1
        self.totals.worker_failures["start"] += 1
        conn, worker.conn = worker.conn, None  # its close is no second failure ("lost")
        self.leaving(session, worker)  # a restart of its process is told to stop
        if conn is not None:
            conn.close()
        if session.start_failures >= MAX_START_FAILURES and session.live:
            self.end(
                session,
                "FAILED",
                f"the service failed to start on {session.start_failures} workers; "
                f"the last one said: {message.strip()}",
            )
        else:
            self.mark(session)

    def service_exited(self, session: Session, worker: Worker, message: str) -> None:
        """The worker's executable died under a task (the worker exits next). Once the
        session's service has answered a task, that is a worker death like any other (its
        connection's end gives its tasks back; a task that keeps doing it is poison), and
        ``message`` goes into the error. Before that, it is a service that cannot serve
        (``/bin/false``, a program that exits at once): its tasks go back unblamed and it
        counts as a failure to start, so that ``MAX_START_FAILURES`` such workers fail the
        session instead of each task killing ``max_worker_deaths`` workers."""
        worker.note = message.strip()
        if session.answered:
            return
        session.book.requeue(worker.job_id)
        self.load_error(session, worker, message)

    # -- the data path ----------------------------------------------------------------
    def submit(self, session: Session, flat: list[Any]) -> None:
        if not session.live or session.state == "CLOSED":
            return
        if flat:
            session.book.add(flat)
            self.totals.tasks_submitted += len(flat) // 2
            if session.journal is not None:
                session.journal.append(["T", flat])
            last = flat[-2]
            if last >= session.next_task_id:
                session.next_task_id = last + 1
        session.last_activity = self.clock()
        self.mark(session)

    def withdraw(self, session: Session, ids: Any) -> list[int]:
        """The client cancels tasks: those no worker holds yet never run. Returns them,
        journaled first (a task the client was told is cancelled is never rerun by a
        recovering broker)."""
        if not session.live or not isinstance(ids, list):
            return []
        out = session.book.withdraw(ids)
        if out:
            if session.journal is not None:
                session.journal.append(["X", out])
                session.journal.flush()
            self.mark(session)  # a closed session may have nothing left to do
        return out

    def results(self, session: Session, worker: Worker, flat: list[Any]) -> None:
        now = self.clock()
        n = len(flat) // 3
        if n and worker.last_result_at:
            session.set_task_seconds((now - worker.last_result_at) / n)
        worker.last_result_at = now
        if not session.answered:  # a value, or the service's own error
            statuses = flat[1::3]
            session.answered = p.OK in statuses or p.FAILED in statuses
        book = session.book
        retried = book.counters.retried
        out = book.complete(worker.job_id, flat)
        if book.counters.retried != retried:
            self.totals.tasks_retried += book.counters.retried - retried
        if out:
            self.totals.count_outcomes(out)
            if session.journal is not None:
                session.journal.append(["R", out])
            session.outbox += out
            session.count_completions(len(out) // 3, now)
        self.mark(session)

    def mark(self, session: Session) -> None:
        self._dirty.add(session)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run_dirty)

    def _run_dirty(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        for session in dirty:
            self.dispatch(session)
            if session.journal is not None:
                session.journal.flush()  # before the client sees a result it records
            session.flush()
            if session.state == "CLOSED" and session.book.unfinished == 0:
                self.end(session, "DONE", "")

    def dispatch(self, session: Session) -> None:
        if session.state not in ("OPEN", "CLOSED"):
            return
        book = session.book
        now = self.clock()
        paused = session.paused  # the client is behind: no new tasks, but drained stop
        window = session.window  # the same for every worker, also one that just joined
        for worker in session.workers.values():
            if worker.conn is None:
                continue
            load = book.load(worker.job_id)
            if worker.state == "draining":
                if load == 0:
                    worker.conn.send([p.STOP])
                continue
            waiting = book.waiting
            if paused:
                continue
            if worker.state != "ready" or not waiting:
                continue
            if load > window // 2:
                continue  # still has half a window queued: send more in bigger batches
            ready = sum(1 for w in session.workers.values() if w.state == "ready")
            share = max(1, math.ceil(waiting / max(1, ready)))
            flat = book.take(worker.job_id, min(window - load, share))
            if flat:
                if load == 0:
                    worker.last_result_at = now  # measure from now, not from idle time
                worker.conn.send([p.TASKS, flat])

    # -- session lifecycle ------------------------------------------------------------
    def end(self, session: Session, state: str, reason: str) -> None:
        if not session.live or session.suspended:
            return
        session.state, session.reason, session.ended = state, reason, self.wall()
        self.totals.sessions_ended[state.lower()] += 1
        # A worker reads STOP only between task frames: one running a long task would
        # hold its CPUs until the task ends, for a result nobody wants. Its job is
        # cancelled (the idle ones stop cleanly).
        busy = [w.job_id for w in session.workers.values() if session.book.load(w.job_id)]
        if state != "DONE":
            session.book.cancel()
        if session.journal is not None:
            session.journal.remove()  # an ended session is not recovered
            session.journal = None
        session.flush()
        for worker in list(session.workers.values()):
            self.release(session, worker)
        for job_id in busy:
            if job_id > 0:  # (a worker started by hand is not a job)
                self._cancel_job(job_id)
        if session.client is not None:
            session.client.send([p.ENDED, state, reason])
        self.persist(session)

    def release(self, session: Session, worker: Worker) -> None:
        if worker.conn is None:  # pending, lost or restarting: its job is cancelled
            if worker.state != "exiting" and worker.job_id > 0:
                self._cancel_job(worker.job_id)
            self.leaving(session, worker)
            return
        worker.state = "draining"
        if session.book.load(worker.job_id) == 0 or not session.live:
            worker.conn.send([p.STOP])

    def persist(self, session: Session, *, insert: bool = False) -> None:
        if self.records is None:
            return
        c = session.book.counters
        values: dict[str, Any] = {
            "state": session.state,
            "reason": session.reason,
            "ended": session.ended,
            "submitted": c.submitted,
            "completed": c.completed,
            "failed": c.failed,
            "retried": c.retried,
            "worker_deaths": c.worker_deaths,
        }
        records = self.records
        if insert:
            values |= {
                "id": session.id,
                "name": session.options.name,
                "user_name": session.user,
                "service": session.options.model_dump_json(),
                "priority": session.options.priority,
                "created": session.created,
            }
            self._db.submit(records.insert, values)
        else:
            self._db.submit(records.update, session.id, values)

    # -- background loops -------------------------------------------------------------
    async def run_pool(self, stop: asyncio.Event) -> None:
        last_record = self.clock()
        last_warning = -math.inf
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POOL_INTERVAL_S)
            try:
                await self.pool_round()
            except Exception as err:
                # The control plane may be restarting: say so now and then, not 4 times/s.
                if self.clock() - last_warning > 30:
                    last_warning = self.clock()
                    log.warning("worker pool round failed (%r); retrying", err)
            now = self.clock()
            if now - last_record >= RECORD_INTERVAL_S:
                last_record = now
                self.housekeeping()

    def housekeeping(self) -> None:
        now = self.clock()
        for session in list(self.sessions.values()):
            session.decay_rate(now)
            self.reap(session, now)
            if session.live:
                self.persist(session)
            elif session.ended is not None and self.wall() - session.ended > ENDED_RETENTION_S:
                del self.sessions[session.id]

    def reap(self, session: Session, now: float) -> None:
        """End ``session`` LOST if it has had no client for ``client_grace`` and is not
        meant to survive one (``Session.survives_client``): nobody will read its results,
        and its workers would hold their CPUs for ever. Called every few seconds
        (``housekeeping``), so it ends up to ``RECORD_INTERVAL_S`` after the grace."""
        since = session.clientless_since
        if since is None or session.client is not None or session.survives_client:
            return
        if now - since < self.client_grace or not session.live:
            return
        self.end(
            session,
            "LOST",
            f"no client for {self.client_grace:.0f} s: its client went away without "
            "detach() and none reattached (detach() or journal=True keeps a session "
            "running without a client)",
        )

    async def pool_round(self) -> None:
        now = self.clock()
        # (a session left for the next broker gets no more workers here)
        sessions = [s for s in self.sessions.values() if not s.suspended]
        for session in sessions:
            for worker in list(session.workers.values()):
                waited = now - worker.lost_at
                if worker.state == "lost" and waited >= VERDICT_WAIT_S:
                    self.worker_gone(session, worker)  # its job's end never came: no cause
                elif worker.state == "restarting" and waited >= RESTART_WAIT_S:
                    self.release(session, worker)  # its keeper did not bring it back
        pool = self.pool_size or self._capacity_cpus or 1
        plan = plan_pool(sessions, pool, self.policy, now)
        for session in sessions:
            session.target_workers = plan.targets.get(session.id, 0)
        for worker in plan.release:
            owner = self.sessions.get(worker.session)
            if owner is not None and worker.state != "draining":
                self.release(owner, worker)
        launches = []
        for session_id, count in plan.launch.items():
            launches += [worker_launch(self.sessions[session_id], self.address)] * count
        # every worker job: a pending one may end before it connects, a connected one
        # may end with no connection loss ever reaching the broker (a node that lost
        # power, a network split)
        watch = [w.job_id for s in sessions for w in s.workers.values() if w.job_id > 0]
        cancel, self._cancel_jobs = self._cancel_jobs, []
        if self.control_plane is None:
            return
        reply = await self.control_plane.sync(
            WorkerSync(
                launch=launches,
                cancel=cancel,
                watch=watch,
                stats=snapshot(self.totals, self.sessions.values()),
            )
        )
        self._capacity_cpus = reply.capacity_cpus
        for launch, job_id, error in zip(
            launches, reply.launched, reply.errors or [""] * len(launches), strict=False
        ):
            target = self.sessions.get(launch.session)
            if target is None:
                continue
            if job_id <= 0:
                self.start_failed(target, f"the worker job was refused: {error}")
                continue
            if not target.live:
                self._cancel_job(job_id)
                continue
            # setdefault: the worker may have connected before this reply came back.
            worker = target.workers.setdefault(job_id, Worker(job_id=job_id, session=target.id))
            worker.launched_at = worker.launched_at or now
        for job_id, state in reply.states.items():
            if state not in ENDED_JOB:
                continue
            for owner in sessions:
                gone = owner.workers.get(int(job_id))
                if gone is None:
                    continue
                if gone.state == "pending":
                    self.forget(owner, gone)
                    self.start_failed(
                        owner,
                        f"worker job {job_id} ended {state} before connecting to the broker "
                        f"(its output is in {owner.options.worker_output})",
                    )
                elif gone.state == "lost" or gone.conn is not None:
                    # lost: its verdict waited for this; connected: its tasks go back
                    conn = gone.conn
                    self.worker_gone(owner, gone, ended=state)
                    if conn is not None:
                        conn.close()
                else:  # exiting, or restarting in a job that ended: no longer counted
                    self.forget(owner, gone)

    def start_failed(self, session: Session, reason: str) -> None:
        session.start_failures += 1
        self.totals.worker_failures["start"] += 1
        if session.start_failures >= MAX_START_FAILURES and session.live:
            self.end(session, "FAILED", f"workers failed to start 3 times; last: {reason}")


MAX_TASK_ID = 2**63 - 1  # next_task_id (last + 1) goes back in WELCOME, packed as 64-bit


def submit_refusal(session: Session, flat: Any) -> str:
    """Why a client's SUBMIT cannot be queued as a whole ("" if it can). Checked before any
    task is queued, so a bad frame queues none of its tasks (a bad id used to queue the
    ones before it and then drop the connection) and the client is told so."""
    n = len(flat) // 2 if isinstance(flat, list) else 0
    whole = f"none of its {n} tasks was queued"
    if session.state != "OPEN":
        return f"session {session.id} is {session.state}: it takes no new tasks; {whole}"
    if not isinstance(flat, list) or len(flat) % 2:
        return "SUBMIT needs a flat list [id, payload, id, payload, ...]; nothing was queued"
    if not flat:
        return ""
    # C loops only (the hot path). Only the last id sets next_task_id, so only it is
    # bounded; a journal replay needs int ids and bytes payloads (or the broker cannot
    # start again).
    ids = flat[0::2]
    if set(map(type, ids)) != {int} or not 0 < flat[-2] <= MAX_TASK_ID:
        return f"task ids must be integers, the last one from 1 to {MAX_TASK_ID}; {whole}"
    if set(map(type, flat[1::2])) != {bytes}:
        return f"task payloads must be bytes (packed arguments); {whole}"
    new = set(ids)
    if len(new) != len(ids) or not session.book.live.isdisjoint(new):
        return (
            "task ids must be unique among the session's unfinished tasks (each gets one "
            f"result); {whole}"
        )
    return ""


ENDED_JOB = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "GONE"}
    | {"BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
