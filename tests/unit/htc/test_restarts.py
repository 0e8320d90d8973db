"""Worker jobs whose process dies, and the jobs a session holds: the broker's side of
``keeper.py`` (a job that starts its process again) and of ``max_workers`` (a job counts
until its end is reported), driven over fake transports and a fake control plane."""

from __future__ import annotations

import asyncio

# helpers of the neighbouring tests (pytest puts this directory on sys.path)
from test_broker import Clock, FakeTransport, attach_client, connect, open_session, tasks, turn

from hal.htc import protocol as p
from hal.htc.broker import RESTART_WAIT_S, Broker, Peer
from hal.htc.rest import WorkerSync, WorkerSyncReply
from hal.htc.session import Session


class Plane:
    """A control plane that starts jobs 5, 6, ... and reports the watched ones RUNNING
    until they are in ``ended``."""

    def __init__(self) -> None:
        self.next_id = 5
        self.launched: list[int] = []
        self.cancelled: list[int] = []
        self.ended: set[int] = set()

    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        ids = list(range(self.next_id, self.next_id + len(request.launch)))
        self.next_id += len(ids)
        self.launched += ids
        self.cancelled += request.cancel
        states = {j: "COMPLETED" if j in self.ended else "RUNNING" for j in request.watch}
        return WorkerSyncReply(launched=ids, states=states, capacity_cpus=4)

    async def close(self) -> None:
        pass


def setup(*submitted: int) -> tuple[Broker, Plane, Clock, Session, FakeTransport]:
    """A session of ``max_workers=1`` whose client submitted tasks ``submitted``."""
    clock, plane = Clock(), Plane()
    broker = Broker(clock=clock, control_plane=plane)
    session = open_session(broker)
    session.options = session.options.model_copy(update={"max_workers": 1})
    client, to_client = attach_client(broker, session)
    broker.on_message(client, [p.SUBMIT, tasks(*submitted)])
    return broker, plane, clock, session, to_client


def start(broker: Broker, session: Session, job_id: int, died: str = "") -> FakeTransport:
    """A process of worker job ``job_id`` (run by a keeper) connects and loads."""
    peer, transport = connect(broker)
    extra = {"keeper": True, "died": died}
    broker.on_message(peer, [p.HELLO_WORKER, session.id, session.worker_key, job_id, "h", 1, extra])
    if not transport.closed:
        broker.on_message(peer, [p.WELCOME, 1])
    return transport


def die(session: Session, job_id: int) -> None:
    conn = session.workers[job_id].conn
    assert isinstance(conn, Peer)
    conn.connection_lost(None)


def test_a_task_that_kills_its_process_is_retried_in_the_same_worker_job() -> None:
    """A task that ends its process (``os._exit``, a segfault) cost a worker job per
    death, 3 per poison task (measured live: 16 jobs for 4 such tasks on 2 workers).
    The job's keeper starts a new process, which reconnects under the same job: the
    task is blamed as before and fails as poison on its third death, naming how the
    process ended, and no job is launched meanwhile."""

    async def main() -> None:
        broker, plane, clock, session, to_client = setup(1)
        await broker.pool_round()
        assert plane.launched == [5]
        died = ""
        first_ready = clock.now
        for death in range(1, 4):
            worker = start(broker, session, 5, died)
            clock.now += 1
            await turn()
            assert worker.sent[-1] == [p.TASKS, tasks(1)]
            die(session, 5)
            assert session.workers[5].state == ("restarting" if death < 3 else "lost")
            await broker.pool_round()
            died = f"the worker process (pid {death}) was killed by signal 11 (SIGSEGV)"
        start(broker, session, 5, died)  # its verdict waited for this
        await turn()
        assert plane.launched == [5] and session.workers[5].state == "ready"
        assert session.workers[5].ready_at == first_ready  # its job's lease runs on
        results = [m[2] for m in to_client.sent if m[0] == p.RESULTS]
        ((task, status, message),) = results
        assert (task, status) == (1, p.POISON)
        assert p.unpack(message).startswith(
            "task 1 was running alone on 3 workers that died (last: job 5 on h (pid 1): "
            f"{died}); it was failed so that it kills no more workers."
        )
        assert broker.totals.worker_failures == {"lost": 3}
        assert session.book.counters.worker_deaths == 3

    asyncio.run(main())


def test_a_process_that_dies_loading_the_service_fails_to_start_and_its_job_stops() -> None:
    """A service whose import crashes the interpreter: each death was a worker lost, not
    a failure to start, so the session launched worker jobs for ever. It counts as a
    failure to start (3 fail the session), and its job is not taken back."""

    async def main() -> None:
        broker, _, _, session, _ = setup(1)
        await broker.pool_round()
        peer, _ = connect(broker)
        hello = [p.HELLO_WORKER, session.id, session.worker_key, 5, "h", 1, {"keeper": True}]
        broker.on_message(peer, hello)
        peer.connection_lost(None)  # before WELCOME
        assert session.start_failures == 1 and session.workers[5].state == "exiting"
        again = start(broker, session, 5, "the worker process (pid 1) exited with status 1")
        assert again.sent == [[p.STOP]] and again.closed

    asyncio.run(main())


def test_a_drained_workers_job_counts_against_max_workers_until_it_has_ended() -> None:
    """Its replacement was launched while it drained, and before its job had ended."""

    async def main() -> None:
        broker, plane, _, session, _ = setup(1)
        await broker.pool_round()
        start(broker, session, 5)
        broker.release(session, session.workers[5])  # as its lease ended
        die(session, 5)  # it stopped
        assert session.workers[5].state == "exiting"
        await broker.pool_round()
        assert plane.launched == [5]  # its job still runs
        plane.ended.add(5)
        await broker.pool_round()
        assert 5 not in session.workers
        await broker.pool_round()
        assert plane.launched == [5, 6]

    asyncio.run(main())


def test_a_job_whose_process_does_not_come_back_is_cancelled_and_replaced() -> None:
    async def main() -> None:
        broker, plane, clock, session, _ = setup(1)
        await broker.pool_round()
        start(broker, session, 5)
        await turn()
        die(session, 5)
        clock.now += RESTART_WAIT_S
        await broker.pool_round()
        assert plane.cancelled == [5] and session.workers[5].state == "exiting"

    asyncio.run(main())
