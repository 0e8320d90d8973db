"""A journaled session outlives its broker process (``journal=True``)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import cast

from hal.api.server import HalServer
from hal.htc import HtcClient
from hal.htc import protocol as p
from hal.htc.rest import SessionTicket
from hal.testing import http
from hal.testing.live import LiveServer, wait_until

SLEEP = "hal.htc.examples:sleep_ms"
AFTER_FILE = "hal.htc.examples:after_file"


def test_killing_the_broker_reopens_journaled_sessions_and_loses_the_others(
    hc: HtcClient, server: LiveServer
) -> None:
    """The broker process dies (SIGKILL) mid-run. Its journaled session is reopened by
    the next broker and reattached by another client, which gets every outcome the first
    client did not see, including those resent with the welcome (they once were lost in
    the client's first read when they came with it: test_client_session.py)."""
    plain = hc.open_session(SLEEP, max_workers=1)
    s = hc.open_session(SLEEP, max_workers=2, journal=True)
    futures = s.submit_many([(10,)] * 300)  # ~1.5 s on 2 workers
    # The first 41 results in, not only the 41st: each worker holds up to two tasks, so
    # the 41st can come back while the other worker still runs an earlier one, which the
    # kill then takes down with the broker (the first client had seen 40).
    assert [f.result(30) for f in futures[:41]] == [10] * 41
    broker = cast(HalServer, server.server).ctx.htc_broker
    assert broker is not None and broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    wait_until(lambda: not broker.running, timeout=5, message="the broker to die")
    wait_until(lambda: s.ended is not None, timeout=5, message="the client to see it")
    before = {f.task_id for f in futures if f.done() and f.exception() is None}
    assert len(before) >= 41
    s.disconnect()
    plain.disconnect()

    with HtcClient(server.url, server.token) as other:
        again = other.attach(s.id)  # starts a broker, which reopens the session
        # Outcomes the client acknowledged are neither resent nor run again.
        assert 0 < again.outstanding_at_attach < 300
        after = {r.task_id: r.value for r in again.results(timeout=30)}
        assert before | set(after) == {f.task_id for f in futures}
        assert all(v == 10 for v in after.values())
        assert again.close(30) == "DONE"
        info = other.session(s.id)
        assert info.journal and (info.submitted, info.completed, info.failed) == (300, 300, 0)
        assert other.session(plain.id).state == "LOST"
    # removed when the session ended: the broker deletes it before it sends the ENDED
    # that close() waited for, so it is gone by now
    journal = Path(server.data_dir) / "htc-journal" / f"{s.id}.journal"
    left = sorted(p.name for p in journal.parent.iterdir())
    assert not journal.exists(), f"{journal.name} outlived its session; left: {left}"


def test_a_client_given_reattach_carries_on_through_a_broker_kill(
    hc: HtcClient, server: LiveServer
) -> None:
    """``reattach``: the same session object's futures and map see nothing of the
    broker's death but the wait. The client asks for a ticket (which starts a broker
    that reopens the session), sends again what the dead broker had not recorded, and
    every task comes back once with its own value."""
    s = hc.open_session(SLEEP, max_workers=2, journal=True, reattach=60)
    futures = s.submit_many([(10,)] * 200)
    futures[20].result(30)
    broker = cast(HalServer, server.server).ctx.htc_broker
    assert broker is not None
    old_pid = broker.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    more = s.submit_many([(5,)] * 50)  # sent while the broker is gone, or to the next one
    assert [f.result(60) for f in futures + more] == [10] * 200 + [5] * 50
    assert list(s.map([1, 2, 3])) == [1, 2, 3]
    assert s.reattaches >= 1 and s.ended is None
    assert broker.pid not in (None, old_pid)
    assert s.close(30) == "DONE"
    info = hc.session(s.id)
    assert (info.submitted, info.completed, info.failed) == (253, 253, 0)


def test_outcomes_never_acknowledged_before_the_kill_all_reach_the_reattached_client(
    hc: HtcClient, server: LiveServer
) -> None:
    """A client that had acknowledged nothing when the broker died: every outcome it was
    sent is in the journal unacknowledged, so the reattached client is owed all 100 tasks
    and gets part of them resent right behind the welcome (the frames that used to be
    dropped with the client's first read)."""
    s = hc.open_session(SLEEP, max_workers=2, journal=True)
    response = http.post(
        f"{server.url}/v1/htc/sessions/{s.id}/attach",
        headers={"Authorization": f"Bearer {server.token}"},
    )
    response.raise_for_status()
    ticket = SessionTicket.model_validate_json(response.content)
    host, _, port = ticket.broker.rpartition(":")
    flat: list[object] = []
    for task_id in range(1, 101):
        flat += [task_id, p.pack([10])]
    seen = 0
    with (
        socket.create_connection((host, int(port)), timeout=30) as raw,
        raw.makefile("rb") as stream,
    ):
        raw.sendall(p.frame([p.HELLO_CLIENT, s.id, ticket.key]))  # replaces s, never ACKs
        raw.sendall(p.frame([p.SUBMIT, flat]))
        while seen < 20:
            message = p.read_frame(stream)
            assert message is not None
            if message[0] == p.RESULTS:
                seen += len(message[2]) // 3
        broker = cast(HalServer, server.server).ctx.htc_broker
        assert broker is not None and broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
        wait_until(lambda: not broker.running, timeout=5, message="the broker to die")
    s.disconnect()

    with HtcClient(server.url, server.token) as other:
        again = other.attach(s.id)
        assert again.outstanding_at_attach == 100  # unfinished + sent, unacknowledged
        after = {r.task_id: r.value for r in again.results(timeout=60)}
        assert set(after) == set(range(1, 101)) and set(after.values()) == {10}
        assert again.close(30) == "DONE"
        info = other.session(s.id)
        assert (info.submitted, info.completed, info.failed) == (100, 100, 0)


def test_a_journaled_session_survives_a_restart_of_the_control_plane(tmp_path: Path) -> None:
    """The server (and its agents) stop cleanly mid-session and start again: the broker
    closed the journal and ended its client's connection; after the restart, a reattach
    starts a new broker, which reopens the session, runs what was left on new workers and
    resends what the client may not have acknowledged. 50 tasks can finish before the
    stop, the 250 others only once ``gate`` exists (after the restart): each task is
    counted once, and every outcome reaches a client."""
    live = LiveServer(tmp_path / "hal")
    gate, open_gate = tmp_path / "gate", tmp_path / "open"
    open_gate.touch()
    calls = [(str(open_gate), x) for x in range(50)] + [(str(gate), x) for x in range(50, 300)]
    with live:
        with live.agents(2, cpus=2), HtcClient(live.url, live.token) as hc:
            s = hc.open_session(AFTER_FILE, max_workers=2, journal=True)
            futures = s.submit_many(calls[:50])
            assert [f.result(30) for f in futures] == list(range(50))
            futures += s.submit_many(calls[50:])
        live.stop()
        wait_until(lambda: s.ended is not None, timeout=10, message="the client to see it")
        assert not any(f.done() and f.exception() is None for f in futures[50:])
        s.disconnect()
        live.start()
        gate.touch()
        with live.agents(2, cpus=2), HtcClient(live.url, live.token) as hc:
            again = hc.attach(s.id)
            after = {r.task_id: r.value for r in again.results(timeout=60)}
            assert set(after) >= {f.task_id for f in futures[50:]}
            assert all(after[f.task_id] == x for x, f in enumerate(futures) if f.task_id in after)
            assert again.close(30) == "DONE"
            info = hc.session(s.id)
            assert (info.submitted, info.completed, info.failed) == (300, 300, 0)
