"""The licenses plugin: a pass hands out at most the cluster's count of each license."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.core.states import PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.slurm.syntax import format_licenses, parse_licenses
from hal.testing import cluster, make_job, placed_nodes, reasons

NOW = 1000.0


def _scheduler(**total: int) -> Scheduler:
    return build_scheduler(
        default_profile(licenses=True, backfill=False), default_registry(licenses=total)
    )


def test_a_pass_hands_out_no_more_licenses_than_there_are() -> None:
    """Two free nodes, one matlab license: the first job asking it starts, the second
    waits with reason Licenses; a job asking none starts beside them."""
    snap = (
        cluster(NOW)
        .uniform_nodes(3, cpus=1)
        .pending(
            make_job(1).licenses(matlab=1),
            make_job(2).licenses(matlab=1),
            make_job(3),
        )
        .build()
    )
    plan = _scheduler(matlab=1).schedule(snap)
    assert set(placed_nodes(plan)) == {1, 3}
    assert reasons(plan)[2] is PendingReason.LICENSES


def test_running_jobs_hold_their_licenses() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(3, cpus=1)
        .running(make_job(1).licenses(ansys=2).running_on("n0001", start=NOW - 5))
        .pending(make_job(2).licenses(ansys=2), make_job(3).licenses(ansys=1))
        .build()
    )
    plan = _scheduler(ansys=3).schedule(snap)
    assert set(placed_nodes(plan)) == {3}  # one of three is free
    assert reasons(plan)[2] is PendingReason.LICENSES


def test_a_job_asking_more_than_the_cluster_has_is_told_so() -> None:
    snap = cluster(NOW).uniform_nodes(1, cpus=1).pending(make_job(1).licenses(matlab=5)).build()
    plan = _scheduler(matlab=2).schedule(snap)
    assert placed_nodes(plan) == {}
    assert reasons(plan)[1] is PendingReason.LICENSES


def test_license_syntax() -> None:
    assert parse_licenses("matlab:2,ansys") == (("ansys", 1), ("matlab", 2))
    assert parse_licenses("a*3, a") == (("a", 4),)  # Slurm's NAME*N; twice adds up
    assert format_licenses(parse_licenses("matlab:2,ansys")) == "ansys:1,matlab:2"
    for bad, why in [
        ("a|b", "no alternative"),
        ("x@db", "remote"),
        ("a:0", "at least 1"),
        (":2", "NAME or NAME:COUNT"),
    ]:
        with pytest.raises(InvalidRequest, match=why) as err:
            parse_licenses(bad)
        assert err.value.field == "licenses"
