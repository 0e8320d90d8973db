"""The worker's task loop (``worker.serve``) over a real socket pair: what a task may do
to it (catch its timeout, switch SIGALRM off, raise SystemExit, return what msgpack
cannot pack) and what the broker hears when an executable service dies."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hal.htc import protocol as p
from hal.htc import service, worker
from hal.htc.examples import EXECUTABLE


def serve(call: Callable[..., Any], calls: list[list[Any]], timeout_s: float = 0.0) -> Any:
    """Send one TASKS frame (task ids 1, 2, ...) and STOP to a worker loop running
    ``call``; returns its exit status and the frames it sent back."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        flat: list[Any] = []
        for task_id, args in enumerate(calls, 1):
            flat += [task_id, p.pack(args)]
        theirs.sendall(p.frame([p.TASKS, flat]) + p.frame([p.STOP]))
        with ours.makefile("rb") as stream:
            rc = worker.serve(ours, stream, call, timeout_s)
        ours.shutdown(socket.SHUT_WR)
        decoder = p.FrameDecoder()
        frames: list[list[Any]] = []
        while chunk := theirs.recv(1 << 16):
            frames += decoder.feed(chunk)
    return rc, frames


def outcomes(frames: list[list[Any]]) -> list[tuple[int, Any]]:
    """``(status, unpacked payload)`` per task, from the RESULTS frames."""
    flat = [x for f in frames if f[0] == p.RESULTS for x in f[2]]
    pairs = zip(flat[1::3], flat[2::3], strict=True)
    return [(status, p.unpack(payload)) for status, payload in pairs]


def sleeper(how: str, seconds: float) -> str:
    if how == "catch Exception":
        try:
            time.sleep(seconds)
        except Exception:
            return "caught"
    elif how == "catch BaseException":
        try:
            time.sleep(seconds)
        except BaseException:
            return "caught"
    elif how == "ignore SIGALRM":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(seconds)
    else:
        time.sleep(seconds)
    return "done"


def test_a_timeout_cannot_be_caught_or_switched_off_by_a_task() -> None:
    """The timeout was an ``Exception``: a task's ``except Exception:`` (or ``except
    BaseException:``) swallowed it and the task succeeded. A task that set SIGALRM to
    SIG_IGN ran on past its timeout and succeeded, and switched timeouts off for every
    later task on the worker. Each task is now timed out (the one that switched SIGALRM
    off once it returns, the next one on time), and the loop's handler is put back."""
    before = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    rc, frames = serve(
        sleeper,
        [
            ["catch Exception", 5],
            ["catch BaseException", 5],
            ["ignore SIGALRM", 0],
            ["ignore SIGALRM", 0.4],
            ["plain", 5],
        ],
        timeout_s=0.2,
    )
    assert rc == 0 and time.monotonic() - started < 3  # the last one did not run 5 s
    timed_out = [(p.TIMED_OUT, f"task {i} ran past its timeout of 0.2 s") for i in range(6)]
    assert outcomes(frames) == [timed_out[1], timed_out[2], (p.OK, "done"), *timed_out[4:]]
    assert issubclass(worker.TaskTimeout, BaseException)
    assert not issubclass(worker.TaskTimeout, Exception)
    assert signal.getsignal(signal.SIGALRM) == before


def raiser(what: str) -> Any:
    if what == "exit":
        sys.exit(3)
    if what == "ctrl-c":
        raise KeyboardInterrupt
    if what == "set":
        return {1, 2}
    return what


def test_system_exit_and_keyboard_interrupt_fail_their_task_and_the_worker_serves_on() -> None:
    """``sys.exit()`` or ``KeyboardInterrupt`` in a task ended the worker process: the
    task was rerun on 3 workers and failed as poison, the exception named nowhere."""
    rc, frames = serve(raiser, [["exit"], ["ctrl-c"], ["after"]])
    assert rc == 0
    assert outcomes(frames) == [
        (p.FAILED, "SystemExit: 3"),
        (p.FAILED, "KeyboardInterrupt"),
        (p.OK, "after"),
    ]


def test_a_return_value_msgpack_cannot_pack_says_so() -> None:
    """It read as if the task had raised: ``TypeError: can not serialize 'set' object``."""
    _, frames = serve(raiser, [["set"], ["fine"]])
    (status, text), after = outcomes(frames)
    assert status == p.FAILED
    assert text.startswith("task 1: its return value (set) could not be serialized: TypeError")
    assert "return msgpack values" in text
    assert after == (p.OK, "fine")


def test_an_executable_that_dies_tells_the_broker_whether_it_ever_answered() -> None:
    """The worker exits with its program; first it says why (``SERVICE_EXITED``), so that
    the broker can tell a program that never answered (a service that fails to start)
    from one a request kills (a poison task)."""
    program = service.ExecutableService(list(EXECUTABLE))
    try:
        rc, frames = serve(program.call, [[b"ok"], [b"crash"], [b"never"]])
    finally:
        program.close()
    assert rc == worker.EXIT_SERVICE_DIED
    assert outcomes(frames) == [(p.OK, b"OK")]
    assert frames[-1][0] == p.SERVICE_EXITED
    assert frames[-1][1].endswith("exited with status 7 while running a task")
    program = service.ExecutableService(["/bin/sh", "-c", "exit 3"])
    try:
        rc, frames = serve(program.call, [[b"x"], [b"y"]])
    finally:
        program.close()
    assert rc == worker.EXIT_SERVICE_DIED
    assert frames == [
        [
            p.SERVICE_EXITED,
            "the service program /bin/sh exited with status 3 before answering any task",
        ]
    ]


BAD_MODULE = """
def deep(n):
    if n == 0:
        raise ImportError("htc_badmod deliberately fails to import")
    return deep(n - 1)


deep(3)
"""


def run_with(init: list[Any]) -> tuple[int, list[Any], list[Any]]:
    """``worker.run`` against a broker that answers its HELLO with ``init``; returns the
    exit status, the HELLO and the frame the worker sent next."""
    listener = socket.create_server(("127.0.0.1", 0))
    said: list[Any] = []

    def broker() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as stream:
            said.append(p.read_frame(stream))
            conn.sendall(p.frame(init))
            said.append(p.read_frame(stream))

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    try:
        rc = worker.run(f"127.0.0.1:{listener.getsockname()[1]}", "s1", "k", "it died")
    finally:
        thread.join(10)
        listener.close()
    hello, after = said
    return rc, hello, after


def test_a_service_that_fails_to_load_reports_the_users_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load error's traceback was cut to its 8 outermost frames: the worker's,
    ``service.load`` and importlib's, never the line of the user's module that failed."""
    (tmp_path / "htc_badmod.py").write_text(BAD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = {"kind": "python", "target": "htc_badmod:f"}
    rc, hello, (kind, message) = run_with([p.INIT, spec, None, 0])
    assert rc == worker.EXIT_LOAD_ERROR
    assert hello[0] == p.HELLO_WORKER and hello[6] == {"keeper": True, "died": "it died"}
    assert kind == p.LOAD_ERROR
    assert 'htc_badmod.py", line 4, in deep' in message
    assert 'htc_badmod.py", line 8, in <module>' in message
    assert message.rstrip().endswith("ImportError: htc_badmod deliberately fails to import")


def test_a_workdir_missing_on_the_workers_node_fails_its_start_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its job ran in /tmp instead (as Slurm's batch step does, saying so only in the
    job's output), and so did the service, without a word. The worker enters the
    session's workdir itself, and one it cannot enter is a failure to start."""
    monkeypatch.chdir(tmp_path)  # (the worker changes directory on success)
    missing = str(tmp_path / "nowhere")
    spec = {"kind": "python", "target": "hal.htc.examples:square"}
    rc, _, (kind, message) = run_with([p.INIT, spec, None, 0, missing])
    assert rc == worker.EXIT_LOAD_ERROR and kind == p.LOAD_ERROR
    assert message == (
        f"the session's workdir {missing} cannot be entered on {socket.gethostname()}: "
        "No such file or directory; create it there (on a file system the nodes share), "
        "or open the session with another workdir"
    )
    (tmp_path / "here").mkdir()
    rc, _, after = run_with([p.INIT, spec, None, 0, str(tmp_path / "here")])
    assert after == [p.WELCOME, os.getpid()] and os.getcwd() == str(tmp_path / "here")
