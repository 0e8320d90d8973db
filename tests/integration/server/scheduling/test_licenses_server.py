"""Licenses on a live cluster: ``[licenses]``, ``sbatch -L``, the reason ``Licenses``,
``scontrol show licenses`` and the refusals at submit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("hal")
    with (
        LiveServer(data, config_overrides={"licenses": {"matlab": 1}}) as server,
        server.agents(1, cpus=4, memory="1G"),
    ):
        yield server


def _state(live: LiveServer, job_id: str) -> tuple[str, str]:
    with live.client() as c:
        info = c.job(job_id)
        return info.state, info.reason


def test_a_license_is_held_by_one_job_at_a_time(live: LiveServer, tmp_path: Path) -> None:
    """Four free CPUs and one matlab license: the second job asking for it waits with
    reason Licenses until the first ends, then runs."""
    gate = tmp_path / "go"
    wait = f"while [ ! -e {gate} ]; do sleep 0.1; done"
    first = live.cli("sbatch", "--parsable", "-L", "matlab", "--wrap", wait, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    one = first.stdout.strip()
    wait_until(lambda: _state(live, one)[0] == "RUNNING", message="the first job to start")
    second = live.cli("sbatch", "--parsable", "--licenses=matlab:1", "--wrap", "true", cwd=tmp_path)
    two = second.stdout.strip()
    wait_until(lambda: _state(live, two) == ("PENDING", "Licenses"), message="the Licenses wait")
    shown = live.cli("scontrol", "show", "licenses").stdout.splitlines()
    assert shown == ["LicenseName=matlab", "   Total=1 Used=1 Free=0 Reserved=0 Remote=no", ""]
    queue = live.cli("squeue", "-h", "-j", two, "-O", "JobID:6,Licenses:12,Reason:10")
    assert queue.stdout.split() == [two, "matlab:1", "Licenses"], queue
    assert "Licenses=matlab:1" in live.cli("scontrol", "show", "job", two).stdout
    gate.touch()
    wait_until(lambda: _state(live, two)[0] == "COMPLETED", message="the second job to run")
    assert "Used=0 Free=1" in live.cli("scontrol", "show", "licenses").stdout


def test_licenses_the_cluster_lacks_are_refused_at_submit(live: LiveServer, tmp_path: Path) -> None:
    for ask, why in [("ansys", "no such license"), ("matlab:2", "the cluster has 1")]:
        out = live.cli("sbatch", "-L", ask, "--wrap", "true", cwd=tmp_path)
        assert out.returncode == 1, out
        assert "Invalid license specification" in out.stderr and why in out.stderr, out.stderr
    bad = live.cli("sbatch", "-L", "matlab|ansys", "--wrap", "true", cwd=tmp_path)
    assert bad.returncode == 1 and "no alternative" in bad.stderr, bad.stderr


def test_a_het_job_asking_more_licenses_in_all_than_the_cluster_has_waits_saying_so(
    live: LiveServer, tmp_path: Path
) -> None:
    """One matlab license, two components asking one each: the het job can never hold
    both, so it never starts and gets no planned start; ``hal explain`` says what it asks
    in all (backfill planned it a second ahead, again and again)."""
    one = JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), licenses="matlab")
    with live.client() as c:
        first, second = c.submit_het([one, one])
        try:
            wait_until(lambda: c.explain(first).reason == "Licenses", message="a pass")
            why = c.explain(first).detail
            assert f"het job {first} asks 2 matlab license(s) in all, the cluster has 1" in why
            assert c.explain(second).reason == "Licenses"
            assert [c.job(j).expected_start for j in (first, second)] == [None, None]
            assert {c.job(j).state for j in (first, second)} == {"PENDING"}
        finally:
            c.cancel(str(first))
