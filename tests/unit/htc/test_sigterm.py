"""SIGTERM inside a session's ``with`` block cancels the session, as Ctrl-C does
(``sigterm.py``), against a scripted broker."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

# helpers of the neighbouring tests (pytest puts this directory on sys.path)
from test_client_session import scripted_broker

from hal.htc import client_session, sigterm
from hal.htc import protocol as p
from hal.htc.client_session import Session

WELCOME = [p.WELCOME, {"session": "s1", "state": "OPEN", "next_task_id": 1}]


@pytest.fixture(autouse=True)
def default_sigterm(monkeypatch: pytest.MonkeyPatch) -> Any:
    """SIGTERM's default action around each test; no 10 s wait for a broker's answer."""
    monkeypatch.setattr(client_session, "LEAVE_TIMEOUT_S", 0.1)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_in_a_block_cancels_its_session_and_exits_143() -> None:
    """``kill PID`` ended the client by the default action: the session's workers held
    their CPUs for the broker's grace (measured live: 25 s with a grace of 20 s, so
    ~305 s by default) before it ended LOST. It is cancelled as the block is left."""
    with (
        scripted_broker([WELCOME]) as (ticket, received, _),
        pytest.raises(sigterm.Terminated) as err,
        Session(ticket),
    ):
        # (checked first: without the handler, the signal would end the test run)
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        signal.raise_signal(signal.SIGTERM)
    assert err.value.code == 143  # a shell's status for a process SIGTERM ended
    assert received[-1] == [p.CANCEL_SESSION, "its client left the session's block with SIGTERM"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # a second one ends it


def test_the_programs_own_handler_is_kept_and_a_block_in_a_thread_sets_none() -> None:
    def mine(_signum: int, _frame: Any) -> None:
        pass

    seen: list[Any] = []

    def block() -> None:
        with scripted_broker([WELCOME]) as (ticket, _, _), Session(ticket) as s:
            seen.append(signal.getsignal(signal.SIGTERM))
            s.disconnect()

    thread = threading.Thread(target=block)  # (signal.signal there raises ValueError)
    thread.start()
    thread.join(30)
    signal.signal(signal.SIGTERM, mine)
    block()
    assert seen == [signal.SIG_DFL, mine]
    assert signal.getsignal(signal.SIGTERM) is mine
