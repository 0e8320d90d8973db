"""What ``scancel -s SIG`` of a pending job relies on (tests/unit/compat/
test_scancel_slurm_checks.py): the server signals nothing and says so by the empty list
of ids it reached, with or without ``steps_only`` or ``batch_only``, and leaves the job
pending; SIGKILL still cancels it."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"))
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def test_a_signal_to_a_pending_job_reaches_no_job(live: LiveServer, tmp_path: Path) -> None:
    with live.client() as admin:
        later = time.time() + 3600
        job = admin.submit(
            JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), begin_time=later)
        )
        pending = str(job.job_id)
        assert admin.cancel(pending, signal=signal.SIGUSR1, steps_only=True) == []
        assert admin.cancel(pending, signal=signal.SIGUSR1, batch_only=True) == []
        assert admin.cancel(pending, signal=signal.SIGTERM) == []
        assert admin.job(pending).state == "PENDING"
        assert admin.cancel(pending, signal=signal.SIGKILL, batch_only=True) == [job.job_id]
        assert admin.job(pending).state == "CANCELLED"
