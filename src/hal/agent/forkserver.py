"""The step launcher process: forks batch jobs' step supervisors and job steps' keepers
on the agent's behalf, both through one handshake (``handshake``).

Run as ``python -P -m hal.agent.forkserver <socket fd> <isolation kind> [<cgroup base>
[<devices> [<cores>]]]``
by ``StepLauncher``. Why a separate process: ``fork`` copies the page tables of the whole
parent, so forking the agent (httpx, pydantic, an event loop, thousands of records) costs
milliseconds, while forking this small single-threaded process costs a fraction of that —
and a single-threaded parent makes the fork safe by construction.

Protocol, over a ``SOCK_SEQPACKET`` socket pair (one message per request or reply)::

    agent → launcher   {"job_id", "key", "job_dir"[, "kind"]}  + the "started" pipe's
                       write end (SCM_RIGHTS); the plan is in <job_dir>/plan.json, read
                       as ``KINDS[kind]`` says ("batch", the default, or "step"); "key"
                       tells the job's launches apart: the batch job's attempt, or the
                       step's run and id
    launcher → agent   {"job_id", "key", "pid", "ticks"}  or  {..., "error": "..."}

Before it replies, the launcher records the child's pid and start time in the folder and
only then lets it go (``handshake``), so nothing runs unrecorded. It exits when the agent
closes the socket; running supervisors and keepers are not its children in any way that
matters (the kernel reaps them: SIGCHLD is ignored) and live on.

This module must stay light: it imports the supervisor, keeper and isolation code and
the standard library only — no httpx, no pydantic.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Callable

from hal.agent.handshake import GO, PLAN_FILE, SUPERVISOR_FILE, write_atomic
from hal.agent.isolation import Isolation
from hal.agent.stepkeeper import KeeperPlan, spawn_keeper
from hal.agent.supervisor import StepPlan, spawn_supervisor
from hal.host.process import start_ticks

MAX_MESSAGE = 64 * 1024
BATCH = "batch"
STEP = "step"
# What differs between the launcher's two kinds of child: the plan it reads from the
# folder's PLAN_FILE, and what it forks (its pid and the descriptor for GO)
KINDS: dict[str, Callable[[str, Isolation, int], tuple[int, int]]] = {
    BATCH: lambda plan, isolation, started_w: spawn_supervisor(
        StepPlan.from_json(plan), isolation, started_w
    ),
    STEP: lambda plan, isolation, started_w: spawn_keeper(
        KeeperPlan.from_json(plan), isolation, started_w
    ),
}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    isolation = Isolation(*args[1:6])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent says when: EOF on the socket
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # exited supervisors are reaped for us
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
        except OSError:
            return
        if not message:
            return
        try:
            reply = launch(json.loads(message), fds[0] if fds else -1, isolation)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.sendall(json.dumps(reply).encode())
        except OSError:
            return


def launch(request: dict[str, object], started_w: int, isolation: Isolation) -> dict[str, object]:
    reply: dict[str, object] = {"job_id": request["job_id"], "key": request["key"]}
    job_dir = str(request["job_dir"])
    try:
        text = _read(os.path.join(job_dir, PLAN_FILE))
        if started_w < 0:
            raise ValueError("no pipe to announce the job's start on")
        pid, go = KINDS[str(request.get("kind", BATCH))](text, isolation, started_w)
        try:
            ticks = start_ticks(pid) or 0
            write_atomic(job_dir, SUPERVISOR_FILE, f"{pid} {ticks}")
            os.write(go, GO)
        finally:
            os.close(go)  # without GO the child exits and starts nothing
    except (OSError, ValueError, KeyError, TypeError) as err:
        reply["error"] = f"the step launcher failed: {err}"
        return reply
    reply["pid"], reply["ticks"] = pid, ticks
    return reply


# The per-launch file work uses raw descriptors: a buffered text file object costs more
# than the system calls it wraps (bench/launch_loop.py).


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, MAX_MESSAGE):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
