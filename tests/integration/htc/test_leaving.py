"""How a session ends when its client leaves without ``close()``: an exception out of
its block, Ctrl-C, a client killed with SIGKILL. A real control plane, agents and
broker; the broker's grace for a lost client is 1 s here (``HAL_HTC_CLIENT_GRACE``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hal import htc
from hal.core.errors import Conflict
from hal.htc import HtcClient
from hal.testing.live import LiveServer, wait_until

AFTER_FILE = "hal.htc.examples:after_file"  # after_file(path, value): value once path exists


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # the broker reads its environment when the module's first session starts it
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HAL_HTC_CLIENT_GRACE", "1")
        with LiveServer(tmp_path_factory.mktemp("hal")) as live, live.agents(2, cpus=2):
            yield live


def worker_jobs(server: LiveServer, session_id: str) -> list[str]:
    with server.client() as c:
        return [j.state for j in c.jobs() if j.name == f"htc-{session_id}"]


def raise_type_error(s: htc.Session) -> None:
    s.submit(object())  # not a msgpack value: TypeError


def raise_ctrl_c(s: htc.Session) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("leave", "error"),
    [(raise_type_error, TypeError), (raise_ctrl_c, KeyboardInterrupt)],
    ids=["TypeError", "KeyboardInterrupt"],
)
def test_an_exception_out_of_the_block_cancels_the_session_and_frees_its_worker(
    hc: HtcClient,
    server: LiveServer,
    tmp_path: Path,
    leave: Callable[[htc.Session], None],
    error: type[BaseException],
) -> None:
    """A bug in the block, or Ctrl-C, while a task waits: the session used to stay OPEN
    with no client for ever, its warm worker job holding its CPU until ``hal htc cancel``.
    Nobody will read its results: it is cancelled as the block is left (not after the
    broker's grace, which would make it LOST), its open future says so and its worker
    job ends, although it is still running that task."""
    gate = tmp_path / "gate"  # never created: the second task waits for ever
    with pytest.raises(error), hc.open_session(AFTER_FILE, min_workers=1, max_workers=1) as s:
        assert s.submit(str(tmp_path), 1).result(60) == 1  # a worker is warm
        waiting = s.submit(str(gate), 2)
        wait_until(lambda: hc.session(s.id).in_flight == 1, message="the worker to run it")
        leave(s)
    info = hc.session(s.id)
    assert info.state == "CANCELLED", info
    assert error.__name__ in info.reason
    with pytest.raises(htc.SessionEnded, match="CANCELLED"):
        waiting.result(10)
    wait_until(lambda: not worker_jobs(server, s.id), timeout=30, message="the worker job to end")


def test_a_journaled_session_left_through_ctrl_c_is_detached_and_reattached(
    hc: HtcClient, tmp_path: Path
) -> None:
    """``journal=True`` asks for a session that survives its client: Ctrl-C detaches it
    (the open future says where its result went) instead of cancelling it, and another
    client reattaches and collects what it produced meanwhile."""
    gate = tmp_path / "gate"
    with (
        pytest.raises(KeyboardInterrupt),
        hc.open_session(AFTER_FILE, max_workers=1, journal=True) as s,
    ):
        waiting = s.submit(str(gate), 7)
        raise KeyboardInterrupt
    with pytest.raises(Conflict, match=rf"detached.*attach\('{s.id}'\)\.results\(\)"):
        waiting.result(10)
    info = hc.session(s.id)
    assert info.state == "OPEN" and not info.client_attached
    gate.touch()
    again = hc.attach(s.id)
    assert [(r.task_id, r.value) for r in again.results(timeout=60)] == [(waiting.task_id, 7)]
    assert again.close(30) == "DONE"


KILLED_CLIENT = textwrap.dedent(
    """
    import os, signal, sys
    from hal.htc import HtcClient
    url, token, gate = sys.argv[1:]
    hc = HtcClient(url, token)
    plain = hc.open_session("hal.htc.examples:after_file", min_workers=1, max_workers=1)
    kept = hc.open_session("hal.htc.examples:after_file", max_workers=1, journal=True)
    left = hc.open_session("hal.htc.examples:after_file", max_workers=1)
    assert plain.submit(sys.executable, 0).result(60) == 0  # its worker is warm
    for s in (plain, kept, left):
        s.submit(gate, 1)
    left.detach()
    print(plain.id, kept.id, left.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no detach, no exception handler
    """
)


def test_a_killed_clients_session_ends_after_the_grace_unless_meant_to_survive_it(
    hc: HtcClient, server: LiveServer, tmp_path: Path
) -> None:
    """A client killed with SIGKILL cannot say goodbye. Its plain session used to stay
    OPEN for ever with its warm worker; the broker now ends it LOST once no client has
    reattached within its grace, and its worker job ends. In the same broker pass, the
    journaled session and the one detached on purpose are kept, and reattach."""
    gate = tmp_path / "gate"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", KILLED_CLIENT, server.url, server.token, str(gate)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,  # it kills itself: -9
    )
    assert out.returncode == -9, out.stderr
    plain, kept, left = out.stdout.split()
    wait_until(lambda: hc.session(plain).state == "LOST", timeout=60, message="the session to end")
    assert "no client for 1 s" in hc.session(plain).reason
    wait_until(lambda: not worker_jobs(server, plain), timeout=30, message="its worker to end")
    gate.touch()
    for session_id in (kept, left):
        assert hc.session(session_id).state == "OPEN"
        again = hc.attach(session_id)
        assert again.survives_client
        assert [r.value for r in again.results(timeout=60)] == [1]
        assert again.close(30) == "DONE"


CLOSING_CLIENT = textwrap.dedent(
    """
    import sys
    from hal.htc import HtcClient
    url, token, gate = sys.argv[1:]
    with HtcClient(url, token) as hc:
        with hc.open_session("hal.htc.examples:after_file", max_workers=1) as s:
            s.submit(gate, 1)
            print(s.id, flush=True)
        # the block is left normally: close() waits for the task, which waits for gate
    """
)


def _client(script: str, server: LiveServer, gate: Path) -> subprocess.Popen[str]:
    """A client program (``script``) in a process of its own, as a user runs one."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-c", script, server.url, server.token, str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_ctrl_c_while_the_block_closes_cancels_the_session(
    hc: HtcClient, server: LiveServer, tmp_path: Path
) -> None:
    """Ctrl-C because the ``with`` block's ``close()`` takes too long: the session was
    left CLOSED with no client, its worker holding its CPU until the broker's grace (300
    s by default) ended it LOST. It is cancelled, as Ctrl-C elsewhere in the block does."""
    gate = tmp_path / "gate"
    client = _client(CLOSING_CLIENT, server, gate)
    try:
        assert client.stdout is not None
        session_id = client.stdout.readline().strip()
        wait_until(lambda: hc.session(session_id).state == "CLOSED", message="close()")
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
        gate.touch()
    assert client.returncode != 0 and "KeyboardInterrupt" in err
    info = hc.session(session_id)  # at once: not after the grace (LOST)
    assert info.state == "CANCELLED", info
    assert info.reason == "its client left the session's block with KeyboardInterrupt"
    wait_until(lambda: not worker_jobs(server, session_id), timeout=30, message="its worker")


BLOCK_CLIENT = textwrap.dedent(
    """
    import sys
    from hal.htc import HtcClient
    url, token, gate = sys.argv[1:]
    with HtcClient(url, token) as hc:
        with hc.open_session("hal.htc.examples:after_file", min_workers=2, max_workers=2) as s:
            waiting = s.submit(gate, 1)
            print(s.id, flush=True)
            waiting.result()
    """
)


def test_sigterm_to_a_client_in_its_block_cancels_the_session_at_once(
    hc: HtcClient, server: LiveServer, tmp_path: Path
) -> None:
    """``kill PID`` ended the client by the signal's default action: its session lost
    its client without a word and its 2 workers held their CPUs for the broker's grace
    (measured: 25.4 s with a grace of 20 s; 300 s by default) before it ended LOST. It
    is cancelled as Ctrl-C does, and the client exits 143, as a shell reports SIGTERM."""
    gate = tmp_path / "gate"  # never created: the task waits for ever
    client = _client(BLOCK_CLIENT, server, gate)
    try:
        assert client.stdout is not None
        session_id = client.stdout.readline().strip()
        wait_until(lambda: hc.session(session_id).in_flight == 1, message="the task to run")
        client.send_signal(signal.SIGTERM)
        _, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode == 143, err
    info = hc.session(session_id)  # at once: not after the grace (LOST)
    assert info.state == "CANCELLED", info
    assert info.reason == "its client left the session's block with SIGTERM"
    wait_until(lambda: not worker_jobs(server, session_id), timeout=30, message="its workers")
