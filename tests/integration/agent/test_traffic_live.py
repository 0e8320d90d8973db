"""Two real batch jobs on one agent talk TCP over loopback: the agent's syncs say which
job listens where and how many bytes each one's connection carried (``AgentSync.traffic``),
what the control plane builds its graph of who talks to whom from."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from conftest import PYTHON, FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.wire.agent import Cancel

MiB = 1 << 20
SERVICE = f"""#!/bin/sh
{PYTHON} -c '
import os, socket
listener = socket.create_server(("127.0.0.1", 0))
with open("port.tmp", "w") as f:
    f.write(str(listener.getsockname()[1]))
os.rename("port.tmp", "port")
conn, _ = listener.accept()
while conn.recv(1 << 16):
    pass
'
"""
CLIENT = f"""#!/bin/sh
{PYTHON} -c '
import os, socket, time
while not os.path.exists("port"):
    time.sleep(0.02)
conn = socket.create_connection(("127.0.0.1", int(open("port").read())))
time.sleep(1.0)  # the agent reads once before: the bytes are new to it
conn.sendall(b"x" * (2 << 20))
time.sleep(600)
'
"""


def test_the_sync_carries_each_jobs_traffic(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
) -> None:
    config = dataclasses.replace(agent_config, traffic_interval_seconds=0.2)

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, SERVICE, workdir), make_launch(2, CLIENT, workdir))
            await agent.started(1)
            await agent.started(2)

            def sent() -> int:
                return sum(f.bytes_sent for t in channel.traffic if t.job_id == 2 for f in t.flows)

            await wait_for(lambda: sent() >= 2 * MiB, "job 2's 2 MiB in the syncs")
            port = int((workdir / "port").read_text())
            listening = {
                (e.address, e.port) for t in channel.traffic if t.job_id == 1 for e in t.listening
            }
            assert listening == {("127.0.0.1", port)}
            assert 2 * MiB <= sent() < 2 * MiB + 256 * 1024
            to_service = {f.remote.port for t in channel.traffic if t.job_id == 2 for f in t.flows}
            assert to_service == {port}
            received = sum(
                f.bytes_received for t in channel.traffic if t.job_id == 1 for f in t.flows
            )
            # the kernel counts the connecting side's SYN as one byte acknowledged
            assert received <= sent() <= received + 1
            channel.push(
                Cancel(job_id=1, kill_wait_seconds=1), Cancel(job_id=2, kill_wait_seconds=1)
            )
            await agent.finished(1)
            await agent.finished(2)

    asyncio.run(scenario())
