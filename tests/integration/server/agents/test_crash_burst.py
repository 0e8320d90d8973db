"""SIGKILL the control plane during a 10,000-job submission burst: no acknowledged job is
lost and none is duplicated (issue 2, "What must be true underneath")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from hal.testing import http
from hal.testing.live import free_port, wait_until
from hal.wire.jobs import JobBatchSubmit, JobSubmit

pytestmark = pytest.mark.live  # `hal server`, in a subprocess


def start_server(data: Path, port: int) -> tuple[subprocess.Popen[str], str | None]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hal.cli.main",
            "server",
            "--data-dir",
            str(data),
            "--port",
            str(port),
            "--init-admin",
            "admin",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    token = None
    line = proc.stdout.readline()
    found = re.search(r"token \(shown once\): (\S+)", line)
    if found:
        token = found.group(1)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return http.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 30, message="the server to start")
    return proc, token


@pytest.mark.slow  # thousands of acknowledged jobs, a killed server, a recount
def test_sigkill_during_burst_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, token = start_server(tmp_path, port)
    assert token
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    acked: dict[str, int] = {}  # job name → id, for every job the server acknowledged
    lock = threading.Lock()
    stop = threading.Event()

    def submitter(worker: int) -> None:
        batch_no = 0
        with httpx.Client(base_url=url, headers=headers, timeout=30) as session:
            while not stop.is_set() and batch_no < 100:
                names = [f"w{worker}-b{batch_no}-j{i}" for i in range(50)]
                body = JobBatchSubmit(
                    jobs=[
                        JobSubmit(script="#!/bin/sh\ntrue\n", name=n, workdir="/tmp", hold=True)
                        for n in names
                    ]
                ).model_dump_json(exclude_defaults=True)
                try:
                    r = session.post("/v1/jobs/batch", content=body)
                except httpx.HTTPError:
                    return  # the server died mid-request: this batch was never acknowledged
                if r.status_code != 201:
                    return
                ids = [res["job_id"] for res in r.json()["results"]]
                with lock:
                    acked.update(zip(names, ids, strict=True))
                batch_no += 1

    threads = [threading.Thread(target=submitter, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    # kill in the middle of the burst (4 workers × 100 batches × 50 = 20,000 offered)
    wait_until(lambda: len(acked) >= 5_000, 120, interval=0.01, message="5,000 acks")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    stop.set()
    for t in threads:
        t.join(60)
    assert 5_000 <= len(acked) < 20_000, len(acked)

    proc, _ = start_server(tmp_path, port)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as session:
            r = session.get("/v1/jobs", params={"history": "true"})
            r.raise_for_status()
            stored = r.json()["jobs"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    names = [j["name"] for j in stored]
    assert len(names) == len(set(names)), "a job was stored twice"
    by_name = {j["name"]: j["id"] for j in stored}
    missing = [n for n in acked if n not in by_name]
    assert not missing, f"{len(missing)} acknowledged jobs were lost, e.g. {missing[:3]}"
    assert all(by_name[n] == i for n, i in acked.items()), "a job changed its id"
    ids = sorted(by_name.values())
    assert len(ids) == len(set(ids))
