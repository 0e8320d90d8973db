"""Two real jobs on two real agents of this machine talk TCP over 127.0.0.1 (as local
agents share it), and the control plane's graph shows the edge between them and their
workloads, with the bytes the client sent counted once in ``hal_harmonic_bytes_total``."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

MiB = 1 << 20


def service(port_file: Path) -> str:
    return f"""#!/bin/sh
{sys.executable} -c '
import os, socket
listener = socket.create_server(("127.0.0.1", 0))
with open("{port_file}.tmp", "w") as f:
    f.write(str(listener.getsockname()[1]))
os.rename("{port_file}.tmp", "{port_file}")
conn, _ = listener.accept()
while conn.recv(1 << 16):
    pass
'
"""


def client(port_file: Path) -> str:
    return f"""#!/bin/sh
{sys.executable} -c '
import os, socket, time
while not os.path.exists("{port_file}"):
    time.sleep(0.05)
conn = socket.create_connection(("127.0.0.1", int(open("{port_file}").read())))
time.sleep(2.0)  # its agent reads the connection once before: the bytes are new to it
conn.sendall(b"x" * (2 << 20))
time.sleep(600)
'
"""


def moved(live: LiveServer) -> float:
    """``hal_harmonic_bytes_total`` over every distance."""
    text = http.get(live.url + "/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hal_harmonic_bytes_total"
    )


def test_two_real_jobs_talking_make_an_edge_with_their_bytes(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    with (
        LiveServer(tmp_path / "hal") as live,
        live.agents(2, cpus=2, memory="1G", extra=["--traffic-interval", "0.5"]),
        live.client() as hal,
    ):
        db = hal.submit(JobSubmit(script=service(port_file), name="db", nodelist=["node1"])).job_id
        calling = hal.submit(
            JobSubmit(script=client(port_file), name="client", nodelist=["node2"])
        ).job_id
        try:
            wait_until(lambda: moved(live) >= 2 * MiB, 60, message="the client's 2 MiB")
            # the client's 2 MiB (and its SYN), the service's acknowledgements: nothing
            assert 2 * MiB <= moved(live) < 2 * MiB + 64 * 1024
            graph = hal.harmonic_graph(job=str(calling))
            (edge,) = graph.jobs
            assert (edge.job_id, edge.peer_job_id) == (str(calling), str(db))
            assert edge.bytes_per_second > 0
            (workloads,) = graph.identities
            assert (workloads.identity, workloads.peer_identity) == ("admin/client", "admin/db")
        finally:
            for job in (db, calling):
                hal.cancel(job)
