"""Backfill plans licenses on a live cluster (PostgreSQL, a real agent): a job waiting
only for licenses gets its start time from when a running job gives them back, and a
lower-priority job that would keep one past then does not take it first."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.scheduler.plugins import default_profile
from hal.testing import http
from hal.testing.live import LiveServer, wait_until


@pytest.fixture
def live(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # the default profile with licenses, bf_interval 1 s instead of 30 s so that the test
    # does not wait for backfill, bf_resolution 1 s instead of 60 s (a release is planned
    # a step from now at the soonest: on a 60 s grid the head's expected start moved on
    # each time the clock crossed a minute), and the requested time as the planned run time
    profile = default_profile(licenses=True)
    profile["plugin_args"] = {"backfill": {"interval_s": 1, "resolution_s": 1}}
    overrides = {
        "licenses": {"matlab": 2},
        "scheduler_profile": profile,
        "scheduler_predictor": "user",
    }
    data = tmp_path_factory.mktemp("hal")
    with (
        LiveServer(data, db_url=pg_url, config_overrides=overrides) as server,
        server.agents(1, cpus=4, memory="1G"),
    ):
        yield server


def _metric(live: LiveServer, name: str) -> float:
    text = http.get(f"{live.url}/metrics", timeout=10).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_job_waiting_for_licenses_starts_before_a_later_one(
    live: LiveServer, tmp_path: Path
) -> None:
    """2 matlab. The holder keeps 1 (time limit 2 min); the head asks 2, so it waits for
    the holder's end; a later job asks 1 for 10 min: the free license is its for the
    taking, but it would still hold it when the head is planned to start, so it waits.
    Once the holder ends, the head runs first."""
    gate = tmp_path / "go"
    wait = f"while [ ! -e {gate} ]; do sleep 0.1; done"

    def submit(*args: str) -> str:
        out = live.cli("sbatch", "--parsable", *args, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    holder = submit("-L", "matlab:1", "--time=2", "--wrap", wait)
    with live.client() as c:
        wait_until(lambda: c.job(holder).state == "RUNNING", message="the holder to start")
        began = c.job(holder).start_time
        assert began is not None
        head = submit("-L", "matlab:2", "--time=1", "--wrap", "true")
        wait_until(
            lambda: c.job(head).expected_start is not None,
            message="backfill to plan the head for when the licenses are back",
        )
        info = c.job(head)
        assert (info.state, info.reason) == ("PENDING", "Licenses")
        expected = info.expected_start
        assert expected is not None
        # the holder's planned end: its start + its time limit
        assert began + 120 <= expected <= began + 120 + 2, (began, expected)

        later = submit("-L", "matlab:1", "--time=10", "--wrap", "true")
        # a backfill pass that saw both waiting jobs, then one more after it: had the
        # later job been started, it would be running by now
        wait_until(
            lambda: _metric(live, "hal_backfill_last_depth_jobs") == 2,
            message="a backfill pass with both jobs",
        )
        seen = _metric(live, "hal_backfill_cycles_total")
        wait_until(
            lambda: _metric(live, "hal_backfill_cycles_total") >= seen + 2,
            message="two more backfill passes",
        )
        assert (c.job(later).state, c.job(later).reason) == ("PENDING", "Licenses")
        assert c.job(head).expected_start == expected

    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(expected))
    sq = live.cli("squeue", "--start", "-h", "-j", head, "-o", "%i %S %r")
    assert sq.stdout.split() == [head, when, "Licenses"], sq

    gate.touch()
    with live.client() as c:
        wait_until(lambda: c.job(later).state == "COMPLETED", message="the later job to run")
        first, second = c.job(head), c.job(later)
        assert first.state == "COMPLETED"
        assert first.start_time is not None and second.start_time is not None
        assert first.start_time <= second.start_time
