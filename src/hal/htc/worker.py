"""A warm service worker: ``python -m hal.htc.worker`` inside a HAL job.

The broker submits one HAL job per worker (see ``pool.py``); its script runs this module,
which connects back to the broker, loads the service once and then runs tasks until told
to stop or the broker goes away. One thread, blocking I/O: while a task runs nothing
else needs doing, and incoming frames wait in the socket buffer. The job's first process
is a ``keeper``: the worker runs in its child, and a task that kills that process costs
a new child, not a new job.

Results are sent back when a frame's tasks are all done, or earlier once a millisecond has
passed since the last send, so a deep batch of no-ops still goes back in one frame. The
check runs after each task: quick results that took under a millisecond in all still wait
for a slow task behind them in the same frame (the broker's window keeps frames to ~4 ms
of observed work, which bounds this for tasks of steady length).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from hal.htc import keeper, service
from hal.htc import protocol as p

FLUSH_AFTER_S = 0.001
EXIT_LOAD_ERROR = 3
EXIT_SERVICE_DIED = 4  # an executable service exited under a task: the keeper restarts
EXIT_BROKER_LOST = 5  # the broker cannot be reached, or its connection broke


class TaskTimeout(BaseException):
    """Raised inside a task by its timer (SIGALRM). A ``BaseException``, as
    ``KeyboardInterrupt`` is: the common ``except Exception:`` in a task must not turn a
    timeout into a result."""


class _Timer:
    fired = False  # the current task's timer went off (it may have caught TaskTimeout)


def _alarm(_signum: int, _frame: object) -> None:
    _Timer.fired = True
    raise TaskTimeout


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    p.keep_alive(sock)  # a vanished broker ends this worker rather than leave it waiting
    return sock


def run(address: str, session: str, key: str, died: str = "") -> int:
    """One worker process: connect, load the service, serve. ``died``: how the job's
    previous worker process ended (``keeper``), for the broker."""
    sock = connect(address)
    stream: Any = sock.makefile("rb", buffering=1 << 20)
    job_id = int(os.environ.get("HAL_JOB_ID", "0"))
    host = socket.gethostname()
    extra = {"keeper": True, "died": died}
    sock.sendall(p.frame([p.HELLO_WORKER, session, key, job_id, host, os.getpid(), extra]))
    init = p.read_frame(stream)
    if init is not None and init[0] == p.STOP:
        return 0  # the broker needs no worker from this job (any more)
    if init is None or init[0] != p.INIT:
        print(f"hal-htc-worker: the broker refused this worker: {init}", file=sys.stderr)
        return 2
    _, spec, common_bytes, timeout_s = init[:4]
    workdir = init[4] if len(init) > 4 else ""
    try:
        os.chdir(workdir or os.curdir)  # its job ran in /tmp if it was missing there
    except OSError as err:
        message = (
            f"the session's workdir {workdir} cannot be entered on {host}: {err.strerror}; "
            "create it there (on a file system the nodes share), or open the session with "
            "another workdir"
        )
        sock.sendall(p.frame([p.LOAD_ERROR, message]))
        print(f"hal-htc-worker: {message}", file=sys.stderr)
        return EXIT_LOAD_ERROR
    try:
        if common_bytes is not None:
            service.set_common(p.unpack(common_bytes))
        call, close = service.load(spec)
    except BaseException:
        # the innermost frames: the user's code, not HAL's and importlib's on the way
        message = f"the service {spec} failed to load:\n{traceback.format_exc(limit=-12)}"
        sock.sendall(p.frame([p.LOAD_ERROR, message]))
        print(message, file=sys.stderr)
        return EXIT_LOAD_ERROR
    sock.sendall(p.frame([p.WELCOME, os.getpid()]))  # loaded: ready for tasks
    try:
        return serve(sock, stream, call, float(timeout_s or 0))
    finally:
        close()


def serve(sock: socket.socket, stream: Any, call: Callable[..., Any], timeout_s: float) -> int:
    """Run the tasks the broker sends until STOP or its connection ends; returns the exit
    status. With ``timeout_s``, each task runs under a SIGALRM timer (main thread only)."""
    if not timeout_s:
        return _serve(sock, stream, call, timeout_s)
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        return _serve(sock, stream, call, timeout_s)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if previous is not None:  # (None: not set from Python)
            signal.signal(signal.SIGALRM, previous)


def _serve(sock: socket.socket, stream: Any, call: Callable[..., Any], timeout_s: float) -> int:
    unpack, pack, frame = p.unpack, p.pack, p.frame
    clock = time.perf_counter
    ok, failed, timed_out = p.OK, p.FAILED, p.TIMED_OUT
    most, budget = p.MAX_ITEM_BYTES, p.FRAME_BUDGET  # locals: read once per task below
    getsignal, sigalrm = signal.getsignal, signal.SIGALRM
    while True:
        message = p.read_frame(stream)
        if message is None:
            return 0  # the broker closed the connection: nothing more to do
        kind = message[0]
        if kind == p.STOP:
            return 0
        if kind != p.TASKS:
            continue
        flat = message[1]
        out: list[Any] = []
        size = 0  # result bytes in ``out``
        last = clock()
        for i in range(0, len(flat), 2):
            task_id = flat[i]
            try:
                if timeout_s:
                    # re-armed per task: a task may have replaced the handler (SIG_IGN),
                    # which switched timeouts off for every later task on this worker
                    if getsignal(sigalrm) is not _alarm:
                        signal.signal(sigalrm, _alarm)
                    _Timer.fired = False
                    started = clock()
                    signal.setitimer(signal.ITIMER_REAL, timeout_s)
                    try:
                        result = call(*unpack(flat[i + 1]))
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    # it caught TaskTimeout and returned anyway, or it switched the timer
                    # off (SIG_IGN) and ran past it: a result it is not
                    if _Timer.fired or clock() - started >= timeout_s:
                        raise TaskTimeout
                else:
                    result = call(*unpack(flat[i + 1]))
                try:
                    packed = pack(result)
                except Exception as err:
                    out += (task_id, failed, pack(_unpackable(task_id, result, err)))
                else:
                    if len(packed) > most:  # the frame would be refused: say why
                        out += (task_id, failed, pack(_too_big(task_id, len(packed))))
                    else:
                        out += (task_id, ok, packed)
                        size += len(packed)
            except TaskTimeout:
                text = f"task {task_id} ran past its timeout of {timeout_s:g} s"
                out += (task_id, timed_out, pack(text))
            except service.ServiceExited as err:
                # The program died under this task: die with it, so the broker re-runs
                # this frame's unfinished tasks elsewhere and blames the task that keeps
                # doing it (poison), instead of failing every later task on a dead pipe.
                # The broker hears why first: a program that never answered a task of
                # the session is a service that fails to start, not a poison task.
                if out:
                    sock.sendall(frame([p.RESULTS, 0, out]))
                sock.sendall(frame([p.SERVICE_EXITED, str(err)]))
                print(f"hal-htc-worker: task {task_id}: {err}", file=sys.stderr)
                return EXIT_SERVICE_DIED
            except service.ServiceError as err:  # the program's own failure reply
                out += (task_id, failed, pack(str(err)))
            except BaseException as err:
                # SystemExit and KeyboardInterrupt too: a task that raises them fails,
                # with the exception as text, and the worker serves on (it used to die,
                # and the task ended as poison with the cause nowhere)
                text = "".join(traceback.format_exception_only(err)).strip()
                out += (task_id, failed, pack(text))
            now = clock()
            if now - last > FLUSH_AFTER_S or size > budget:
                sock.sendall(frame([p.RESULTS, 0, out]))
                out, size = [], 0
                last = now
        if out:
            sock.sendall(frame([p.RESULTS, 0, out]))


def _unpackable(task_id: int, result: Any, err: Exception) -> str:
    why = "".join(traceback.format_exception_only(err)).strip()
    return (
        f"task {task_id}: its return value ({type(result).__name__}) could not be "
        f"serialized: {why}; return msgpack values (numbers, str, bytes, lists, dicts)"
    )


def _too_big(task_id: int, size: int) -> str:
    return (
        f"task {task_id}: its result packs to {size} bytes, over the {p.MAX_ITEM_BYTES} a "
        "result may carry; write big results to a file and return its path"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hal-htc-worker")
    parser.add_argument("--broker", required=True, help="HOST:PORT of the HTC broker")
    parser.add_argument("--session", required=True)
    parser.add_argument(
        "--key",
        default=os.environ.get(p.WORKER_KEY_ENV, ""),
        help=f"the session's worker key (default {p.WORKER_KEY_ENV}; on the command line, "
        "every user of the host can read it)",
    )
    ns = parser.parse_args(argv)

    def child(died: str) -> int | None:
        try:
            code = run(ns.broker, ns.session, ns.key, died)
        except OSError as err:  # refused, reset, timed out by keepalive: a line, no traceback
            why = err.strerror or err.__class__.__name__
            print(f"hal-htc-worker: lost the HTC broker at {ns.broker}: {why}", file=sys.stderr)
            return EXIT_BROKER_LOST
        return None if code == EXIT_SERVICE_DIED else code  # None: start a new one

    return keeper.keep(child)


if __name__ == "__main__":
    sys.exit(main())
