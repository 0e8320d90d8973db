"""``sdiag`` against a live control plane: the scheduler statistics since the server
started, the same numbers ``/metrics`` exports, in Slurm's layout.

One 2-CPU agent. A blocker takes the node, a second job waits behind it (the backfill
stage runs with it, bf_interval 1 s), a third is cancelled while pending; then the
blocker is cancelled and the second job runs and exits 3: 3 submitted, 2 started,
1 completed (Slurm 22.05 counts a job whose script ended as completed, whatever its exit
status), 2 cancelled, 0 failed."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.scheduler.plugins import default_profile
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    profile = default_profile()
    profile["plugin_args"] = {"backfill": {"interval_s": 1}}
    overrides = {"kill_wait_seconds": 2, "scheduler_profile": profile}
    data = tmp_path_factory.mktemp("hal")
    with LiveServer(data, config_overrides=overrides) as server, server.agents(1, cpus=2):
        yield server


def _job(tmp: Path, script: str, limit: int = 300) -> JobSubmit:
    return JobSubmit(
        script=f"#!/bin/sh\n{script}\n", workdir=str(tmp), time_limit_seconds=limit,
        cpus_per_task=2,
    )  # fmt: skip


def _value(text: str, label: str) -> int:
    found = re.search(rf"^\t?{re.escape(label)}:\s+(\d+)$", text, re.MULTILINE)
    assert found is not None, f"no {label!r} line in:\n{text}"
    return int(found.group(1))


def _metric(live: LiveServer, name: str) -> float:
    body = http.get(live.url + "/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith(name) and line[len(name)] in " {"
    )


def test_sdiag_counts_what_the_server_did_since_it_started(
    live: LiveServer, tmp_path: Path
) -> None:
    before = time.time()
    with live.client() as c:
        blocker = c.submit(_job(tmp_path, "sleep 300")).job_id
        wait_until(lambda: c.job(blocker).state == "RUNNING", message="the blocker to start")
        second = c.submit(_job(tmp_path, "exit 3", limit=60)).job_id
        third = c.submit(_job(tmp_path, "true", limit=60)).job_id
        wait_until(
            lambda: _metric(live, "hal_backfill_cycles_total") >= 1,
            message="a backfill stage with the waiting jobs",
        )
        c.cancel(third)
        c.cancel(blocker)
        wait_until(lambda: c.job(second).state == "FAILED", message="the second job")
        wait_until(lambda: c.job(blocker).state == "CANCELLED", message="the blocker's end")

    out = live.cli("sdiag")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    lines = text.splitlines()
    assert lines[0] == lines[3] == "*" * 55
    now = re.fullmatch(r"sdiag output at \w{3} \w{3} \d\d \d\d:\d\d:\d\d \d{4} \((\d+)\)", lines[1])
    since = re.fullmatch(
        r"Data since      \w{3} \w{3} \d\d \d\d:\d\d:\d\d \d{4} \((\d+)\)", lines[2]
    )
    assert now is not None and since is not None, lines[:4]
    # (whole seconds, as Slurm prints them)
    assert int(since.group(1)) <= before < int(now.group(1)) + 1 <= time.time() + 1

    assert _value(text, "Jobs submitted") == 3
    assert _value(text, "Jobs started") == 2
    assert _value(text, "Jobs completed") == 1
    assert _value(text, "Jobs canceled") == 2
    assert _value(text, "Jobs failed") == 0
    assert _value(text, "Jobs pending") == 0
    assert _value(text, "Jobs running") == 0

    main = text.split("Main schedule statistics (microseconds):\n")[1].split("\n\n")[0]
    cycles = _value(main, "Total cycles")
    assert cycles >= 2  # the blocker's pass, the waiting jobs', the second job's start
    assert _value(main, "Max cycle") >= _value(main, "Mean cycle") > 0
    assert _value(main, "Max cycle") >= _value(main, "Last cycle") > 0
    assert _value(main, "Mean depth cycle") >= 1
    assert cycles == _metric(live, "hal_scheduling_cycle_duration_seconds_count")

    backfill = text.split("Backfilling stats\n")[1]
    assert _value(backfill, "Total cycles") == _metric(live, "hal_backfill_cycles_total") >= 1
    assert _value(backfill, "Total backfilled jobs (since last slurm start)") == _metric(
        live, "hal_backfill_jobs_started_total"
    )
    assert _value(backfill, "Last depth cycle") >= 1
    assert _value(backfill, "Max cycle") >= _value(backfill, "Last cycle") > 0
    when = re.search(r"^\tLast cycle when: .* \((\d+)\)$", backfill, re.MULTILINE)
    assert when is not None and before - 1 <= int(when.group(1)) <= time.time()
    assert _value(backfill, "Last queue length") == _value(backfill, "Last depth cycle")
    # the lines monitoring reads: sdiag's own request is in flight
    assert _value(text, "Server thread count") >= 1
    assert _value(text, "Agent queue size") == 0  # nothing waits for the agent
    assert _value(text, "DBD Agent queue size") == 0
    rpc = text.split("Remote Procedure Call statistics by message type\n")[1]
    by_type, by_user = rpc.split("\n\nRemote Procedure Call statistics by user\n")
    submits = re.search(r"^\tREQUEST_SUBMIT_BATCH_JOB {16}\( 4003\) count:(\d+) +ave_time:\d+ +"
                        r"total_time:\d+$", by_type, re.MULTILINE)  # fmt: skip
    assert submits is not None and int(submits.group(1)) == 3, by_type
    assert "\tMESSAGE_NODE_REGISTRATION_STATUS        ( 1002) count:1 " in by_type
    assert re.search(r"^\tadmin {11}\( +admin\) count:\d+ ", by_user, re.MULTILINE), by_user
    assert text.endswith("Pending RPC statistics\n\tNo pending RPCs\n")
    # Slurm lines HAL has no number for are left out, not printed as zeros
    for missing in ("Agent count", "Agent thread count", "try sched", "table size", "gettime"):
        assert missing not in text


def test_sdiag_r_resets_what_slurm_resets(live: LiveServer) -> None:
    """Slurm 22.05.8: ``Reset scheduling statistics`` for an administrator; a plain user
    is refused (``Access/permission denied``); the counters start again, "Data since"
    moves, the last cycle stays, ``/metrics`` goes on."""
    submitted = _metric(live, "hal_jobs_submitted_total")
    nobody = live.add_users("nobody")["nobody"]
    refused = live.cli("sdiag", "-r", token=nobody)
    assert refused.returncode == 1
    assert refused.stderr == "slurm_reset_statistics: Access/permission denied\n"
    before = time.time()
    out = live.cli("sdiag", "-r")
    assert (out.returncode, out.stdout) == (0, "Reset scheduling statistics\n"), out.stderr
    text = live.cli("sdiag").stdout
    since = re.search(r"^Data since .* \((\d+)\)$", text, re.MULTILINE)
    assert since is not None and int(since.group(1)) >= int(before)
    assert _value(text, "Jobs submitted") == 0
    assert _metric(live, "hal_jobs_submitted_total") == submitted
    by_type = text.split("by message type\n")[1].split("\n\n")[0].splitlines()
    # only the reset itself, a REQUEST_STATS_INFO as in Slurm (this sdiag counts once
    # answered); the agents' heartbeats go on meanwhile, as slurmd's would
    heads = [line.split()[:3] for line in by_type]
    assert [h for h in heads if h[:2] != ["POST", "/v1/agent/{node}/sync"]] == [
        ["REQUEST_STATS_INFO", "(", "2035)"]
    ], by_type


def test_a_fresh_server_shows_no_means_and_no_backfill_time(tmp_path: Path) -> None:
    """Before any pass Slurm prints no means (they would divide by zero) and "Last cycle
    when: N/A" (observed with Slurm 22.05)."""
    with LiveServer(tmp_path) as fresh:
        out = fresh.cli("sdiag")
    assert out.returncode == 0, out.stderr
    main = out.stdout.split("Main schedule statistics (microseconds):\n")[1]
    main, backfill = main.split("\nBackfilling stats\n")
    assert _value(main, "Total cycles") == 0
    assert "Mean" not in main
    assert _value(backfill, "Total cycles") == 0
    assert "\tLast cycle when: N/A" in backfill.splitlines()
    assert "Mean" not in backfill


def test_the_means_come_with_the_counts(live: LiveServer) -> None:
    """``GET /v1/diag`` carries the means sdiag prints (computed once, on the server):
    Slurm's integer divisions of the microsecond sums by the cycles."""
    with live.client() as c:
        d = c.diag()

    def mean(total: int, count: int) -> int:
        return total // count if count else 0

    assert d.mean_cycle_us == mean(int(d.total_cycle_s * 1_000_000), d.cycles)
    assert d.mean_depth == mean(d.total_depth, d.cycles)
    backfill_us = int(d.backfill_total_cycle_s * 1_000_000)
    assert d.backfill_mean_cycle_us == mean(backfill_us, d.backfill_cycles)
    assert d.backfill_mean_depth == mean(d.backfill_total_depth, d.backfill_cycles)
