"""The broker process: ``python -m hal.htc.brokerd`` (started by the control plane).

Configuration comes from the environment the control plane sets:
``HAL_HTC_CONTROL_KEY`` (required), ``HAL_HTC_SERVER_URL``, ``HAL_HTC_DB_URL``,
``HAL_HTC_BIND`` (default 127.0.0.1), ``HAL_HTC_ADVERTISE`` (the host workers and clients
dial; default the bind address), ``HAL_HTC_PORT`` (default 0: any free port) and
``HAL_HTC_POOL_SIZE`` (workers in all; default the cluster's CPUs) and
``HAL_HTC_JOURNAL_DIR`` (journals of recoverable sessions; none: ``journal=True`` refused)
and ``HAL_HTC_CLIENT_GRACE`` (seconds a session whose client went away without detaching
waits for a reattach before it ends LOST; default ``broker.CLIENT_GRACE_S``).
Journaled sessions an earlier broker left open are reopened at start; the others are
marked LOST.

It prints ``listening HOST:PORT`` once ready and exits when its standard input closes, so
it never outlives the control plane that started it, even one killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

from hal.htc.broker import CLIENT_GRACE_S, Broker, Peer
from hal.htc.controlplane import HttpControlPlane
from hal.htc.records import SessionRecords

log = logging.getLogger("hal.htc.broker")


async def serve() -> None:
    env = os.environ
    bind = env.get("HAL_HTC_BIND", "127.0.0.1")
    records = SessionRecords(env["HAL_HTC_DB_URL"]) if env.get("HAL_HTC_DB_URL") else None
    server_url = env.get("HAL_HTC_SERVER_URL", "")
    key = env["HAL_HTC_CONTROL_KEY"]
    control = HttpControlPlane(server_url, key) if server_url else None
    broker = Broker(
        control_key=key,
        control_plane=control,
        records=records,
        pool_size=int(env.get("HAL_HTC_POOL_SIZE", "0")),
        journal_dir=env.get("HAL_HTC_JOURNAL_DIR", ""),
        client_grace=client_grace(env.get("HAL_HTC_CLIENT_GRACE", "")),
    )
    recovered = broker.recover()
    if records is not None:
        records.mark_lost(broker.wall(), keep=recovered)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Peer(broker), bind, int(env.get("HAL_HTC_PORT", "0")), backlog=1024
    )
    port = server.sockets[0].getsockname()[1]
    broker.address = f"{env.get('HAL_HTC_ADVERTISE') or bind}:{port}"
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(0, 4096) else None)
    print(f"listening {broker.address}", flush=True)
    pool = asyncio.create_task(broker.run_pool(stop))
    try:
        await stop.wait()
    finally:
        server.close()  # no new client may attach to a session left for the next broker
        broker.suspend()
        if broker.control_plane is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(broker.pool_round(), 5)
        pool.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pool
        if control is not None:
            await control.close()
        broker.close()
        if records is not None:
            records.close()


def client_grace(text: str) -> float:
    """``HAL_HTC_CLIENT_GRACE``; a bad value stops the start with a message the control
    plane shows (its first line of output), not a traceback it cannot."""
    if not text:
        return CLIENT_GRACE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # (NaN too); inf: such sessions are never ended
        print(f"HAL_HTC_CLIENT_GRACE={text!r}: give seconds, 0 or more, or inf", flush=True)
        sys.exit(2)
    return seconds


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s htc-broker %(message)s")
    try:
        import uvloop
    except ImportError:  # uvloop is optional; asyncio's own loop is only slower
        asyncio.run(serve())
    else:
        uvloop.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
