"""``BrokerProcess``: the control plane's handle on its HTC broker process.

Started on first use (most clusters never open a session, and then no broker runs),
stopped with the control plane. The broker exits on its own when its standard input
closes, so a control plane that dies does not leave it behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import time
from typing import Any

from hal.htc import protocol as p
from hal.htc.rest import HtcStats

START_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 10.0
STATS_MAX_AGE_S = 10.0  # older broker reports are not shown (the broker is stuck)


class BrokerUnavailable(Exception):
    pass


class BrokerProcess:
    def __init__(
        self, *, db_url: str, bind: str = "", advertise: str = "", journal_dir: str = ""
    ) -> None:
        self.db_url = db_url
        self.journal_dir = journal_dir
        self.bind = bind or os.environ.get("HAL_HTC_BIND", "127.0.0.1")
        self.advertise = advertise or os.environ.get("HAL_HTC_ADVERTISE", "")
        self.key = secrets.token_hex(24)  # the broker's control key (also its key to us)
        self.address = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = asyncio.Lock()
        self._stats: HtcStats | None = None  # the broker's last report (each pool round)
        self._stats_at = 0.0

    def report(self, stats: HtcStats) -> None:
        self._stats, self._stats_at = stats, time.monotonic()

    def stats(self) -> HtcStats | None:
        """The broker's latest aggregate numbers, or None when none runs or it is silent."""
        if not self.running or time.monotonic() - self._stats_at > STATS_MAX_AGE_S:
            return None
        return self._stats

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def ensure(self, server_url: str) -> str:
        """Start the broker if it is not running; return its HOST:PORT."""
        async with self._lock:
            if self.running:
                return self.address
            self._proc = None
            self._stats = None
            env = {
                **os.environ,
                "HAL_HTC_CONTROL_KEY": self.key,
                "HAL_HTC_SERVER_URL": server_url,
                "HAL_HTC_DB_URL": self.db_url,
                "HAL_HTC_BIND": self.bind,
                "HAL_HTC_ADVERTISE": self.advertise,
                "HAL_HTC_JOURNAL_DIR": self.journal_dir,
            }
            proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; the wait is async
                [sys.executable, "-m", "hal.htc.brokerd"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                start_new_session=True,  # ^C to the server is the server's to handle
            )
            assert proc.stdout is not None
            try:
                line = await asyncio.wait_for(
                    asyncio.to_thread(proc.stdout.readline), START_TIMEOUT_S
                )
            except TimeoutError:
                proc.kill()
                raise BrokerUnavailable("the HTC broker did not start in time") from None
            text = line.decode().strip()
            if not text.startswith("listening "):
                proc.kill()
                raise BrokerUnavailable(f"the HTC broker failed to start: {text!r}")
            self.address = text.split(" ", 1)[1]
            self._proc = proc
            return self.address

    async def request(self, op: str, args: dict[str, Any]) -> Any:
        """One control request; raises ``BrokerUnavailable`` or returns the reply pair."""
        if not self.running:
            raise BrokerUnavailable("the HTC broker is not running")
        host, _, port = self.address.rpartition(":")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.bind if self.bind != "0.0.0.0" else host, int(port)),
                REQUEST_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as err:
            raise BrokerUnavailable(f"cannot reach the HTC broker: {err}") from err
        try:
            writer.write(p.frame([p.CONTROL, self.key, op, args]))
            header = await asyncio.wait_for(reader.readexactly(4), REQUEST_TIMEOUT_S)
            (size,) = p.HEADER.unpack(header)
            body = await asyncio.wait_for(reader.readexactly(size), REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as err:
            raise BrokerUnavailable(f"the HTC broker did not answer: {err}") from err
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        reply = p.unpack(body)
        return reply[1], reply[2]

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the broker's signal to end its sessions and exit
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
        except TimeoutError:
            proc.kill()
            await asyncio.to_thread(proc.wait)
        if proc.stdout is not None:
            proc.stdout.close()
