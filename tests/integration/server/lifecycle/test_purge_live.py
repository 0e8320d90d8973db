"""A control plane with ``[accounting]`` retentions deletes old events and finished jobs by
itself, in the background, while it serves: a job that ran on a real agent leaves sacct
and the event log, a held job submitted before it stays, and the purge is logged and
counted in /metrics."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hal.config.accounting import AccountingConfig, Retention
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_server_purges_old_events_and_jobs_while_it_runs(
    store: str, request: pytest.FixtureRequest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db_url = request.getfixturevalue("pg_url") if store == "postgresql" else None
    # hal.toml's units are hours and more; the config itself takes seconds, and a
    # purge every 0.2 s instead of every hour
    accounting = AccountingConfig(
        purge_events_after=Retention(seconds=2.0),
        purge_jobs_after=Retention(seconds=2.0),
        purge_check_seconds=0.2,
    )
    overrides: dict[str, object] = {"min_job_age_seconds": 0, "accounting": accounting}
    caplog.set_level(logging.INFO, logger="hal.accounting")
    with (
        LiveServer(tmp_path, db_url=db_url, config_overrides=overrides) as live,
        live.agents(1),
        live.client() as client,
    ):
        held = client.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True))
        ran = client.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path)))

        def purged() -> bool:
            return [j.id for j in client.jobs(history=True)] == [held.job_id]

        wait_until(purged, 60, message="the finished job to be purged")
        assert client.job(held.job_id).state == "PENDING"
        # the newest event stays whatever its age (its id is the revision): one more
        later = client.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True))
        wait_until(
            lambda: not [e for e in client.events(follow=False) if e.job_id == ran.job_id],
            30,
            message="the finished job's events to be purged",
        )
        metrics = http.get(f"{live.url}/metrics", timeout=10).text
        assert 'hal_accounting_purged_records_total{record="jobs"} 1.0' in metrics
        events = [ln for ln in metrics.splitlines() if 'purged_records_total{record="events"' in ln]
        assert events and float(events[0].split()[-1]) >= 3  # submitted, started, finished
        # by id: a held job is in no time window (never eligible), as in Slurm's sacct
        ids = ",".join(str(j.job_id) for j in (held, ran, later))
        sacct = live.cli("sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ids)
        assert sacct.stdout.split() == [f"{j.job_id}|PENDING" for j in (held, later)], sacct
    assert any(
        r.name == "hal.accounting" and "1 finished jobs older than 2s" in r.getMessage()
        for r in caplog.records
    ), caplog.text
