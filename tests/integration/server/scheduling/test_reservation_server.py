"""Advance reservations against a real server and real agents: the REST routes, scontrol
and sbatch as a user types them, and the scheduler keeping an ordinary job off a
reserved node while a ``--reservation`` job runs there."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from hal.scheduler.plugins import default_profile
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit
from hal.wire.reservations import ReservationCreate, ReservationUpdate


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # bf_interval 1 s instead of 30 s: the ordinary job kept off the reserved node blocks
    # its partition (reason Resources, as in Slurm), so the other ordinary job behind it
    # starts at the next backfill run. (A --reservation job behind it is exempt from
    # that gate and starts in the main pass.)
    profile = default_profile()
    profile["plugin_args"] = {"noderesources": {"score": "best_fit"}, "backfill": {"interval_s": 1}}
    overrides = {"kill_wait_seconds": 2, "scheduler_profile": profile}
    data = tmp_path_factory.mktemp("resv")
    with LiveServer(data, config_overrides=overrides) as live, live.agents(2, cpus=2, memory="1G"):
        yield live


def test_rest_create_list_update_delete(server: LiveServer) -> None:
    now = time.time()
    server.add_users("alice", "bob", "a")
    with server.client() as c:
        # a user or an account that does not exist is refused (a typo would keep the
        # nodes from everyone), as Slurm refuses them
        with pytest.raises(InvalidRequest, match="Invalid user id: 'opps' is no user"):
            c.create_reservation(
                ReservationCreate(name="typo", duration_seconds=60, nodes=["node1"], users=["opps"])
            )
        assert c.reservations() == []
        made = c.create_reservation(
            ReservationCreate(
                name="rest1",
                start_time=now + 3600,
                duration_seconds=600,
                nodes=["node1"],
                users=["alice"],
                flags=["maint"],
            )
        )
        assert made.node_count == 1 and made.core_count == 2 and made.state == "INACTIVE"
        assert made.flags == ["MAINT", "SPEC_NODES"]  # (implied: nodes named, as Slurm)
        assert [r.name for r in c.reservations()] == ["rest1"]
        changed = c.update_reservation("rest1", ReservationUpdate(duration_seconds=1200))
        assert changed.end_time == pytest.approx(now + 3600 + 1200)
        with pytest.raises(Conflict, match="Flags=OVERLAP"):
            c.create_reservation(
                ReservationCreate(
                    name="rest2",
                    start_time=now + 3700,
                    duration_seconds=60,
                    nodes=["node1"],
                    users=["bob"],
                )
            )
        with pytest.raises(InvalidRequest, match="unknown node 'node7'"):
            c.create_reservation(
                ReservationCreate(name="rest3", duration_seconds=60, nodes=["node7"], users=["a"])
            )
        c.delete_reservation("rest1")
        with pytest.raises(NotFound):
            c.reservation("rest1")
        bob = c.add_user("resvbob").token
    with server.client(bob) as c:
        assert c.reservations() == []  # anyone may list
        with pytest.raises(PermissionDenied, match="only an administrator"):
            c.create_reservation(
                ReservationCreate(name="mine", duration_seconds=60, nodes=["node2"], users=["x"])
            )
    r = http.post(
        server.url + "/v1/reservations",
        json={"name": "bad name", "duration_seconds": 60, "nodes": ["node1"]},
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert r.status_code == 400 and r.json()["field"].endswith("name")


def test_scontrol_and_sbatch_as_typed(server: LiveServer, tmp_path: Path) -> None:
    me = server.client().whoami().name
    out = server.cli(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=cli",
        "StartTime=now+1hour",
        "Duration=30:00",
        "Nodes=node2",
        f"Users={me}",
        "Flags=DAILY",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Reservation created: cli"
    shown = server.cli("scontrol", "show", "reservation", "cli")
    assert "ReservationName=cli StartTime=" in shown.stdout
    assert "Duration=00:30:00" in shown.stdout and "Flags=DAILY" in shown.stdout
    assert f"Users={me} Groups=(null)" in shown.stdout and "State=INACTIVE" in shown.stdout
    upd = server.cli("scontrol", "update", "ReservationName=cli", "Duration=45:00")
    assert (
        upd.returncode == 0 and "Duration=00:45:00" in server.cli("scontrol", "show", "res").stdout
    )
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --reservation=nope\n#SBATCH -t 5\ntrue\n")
    refused = server.cli("sbatch", str(script), cwd=tmp_path)
    assert refused.returncode == 1
    assert "sbatch: error: Batch job submission failed: Requested reservation is invalid" in (
        refused.stderr
    )
    unlimited = server.cli("sbatch", "--reservation=cli", "--wrap=true", cwd=tmp_path)
    assert "needs a time limit that fits" in unlimited.stderr
    gone = server.cli("scontrol", "delete", "ReservationName=cli")
    assert gone.returncode == 0, gone.stderr
    missing = server.cli("scontrol", "show", "reservation", "cli")
    assert missing.returncode == 1 and "Reservation cli not found" in missing.stdout


def test_a_reservation_keeps_ordinary_jobs_off_and_runs_its_own(
    server: LiveServer, tmp_path: Path
) -> None:
    with server.client() as c:
        me = c.whoami().name
        c.create_reservation(
            ReservationCreate(name="lab", duration_seconds=3600, nodes=["node1"], users=[me])
        )
        try:
            # an ordinary job asking for node1 waits: the reservation holds it
            pinned = c.submit(
                JobSubmit(
                    script="#!/bin/sh\ntrue\n",
                    workdir=str(tmp_path),
                    nodelist=["node1"],
                    time_limit_seconds=60,
                )
            ).job_id
            # an ordinary job without a node list runs, on node2
            free = c.submit(
                JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), time_limit_seconds=60)
            ).job_id
            wait_until(lambda: c.job(free).state == "COMPLETED", message="the free job to run")
            assert c.job(free).nodes == ["node2"]
            # the reservation's job runs on node1 (sbatch as a user types it)
            out = server.cli(
                "sbatch",
                "--parsable",
                "--reservation=lab",
                "-t",
                "5",
                "--wrap=hostname",
                cwd=tmp_path,
            )
            assert out.returncode == 0, out.stderr
            inside = int(out.stdout.strip())
            wait_until(lambda: c.job(inside).state == "COMPLETED", message="the reserved job")
            job = c.job(inside)
            assert job.nodes == ["node1"] and job.reservation == "lab"
            wait_until(lambda: c.job(pinned).reason == "Resources", message="a reason")
            assert c.job(pinned).state == "PENDING"
            explained = server.cli("explain", str(pinned))
            assert "reserved (lab)" in explained.stdout, explained.stdout
            # once the reservation is gone the pinned job runs
            c.delete_reservation("lab")
            wait_until(lambda: c.job(pinned).state == "COMPLETED", message="the pinned job")
        finally:
            with contextlib.suppress(NotFound):
                c.delete_reservation("lab")


def test_a_reservation_in_use_cannot_be_deleted(server: LiveServer, tmp_path: Path) -> None:
    """Slurm 22.05.8 refuses to delete a reservation that a pending or running job uses
    (``delete_reservation reservationname=p1: Requested reservation is in use``, rc 1)
    and deletes it once its jobs have ended; HAL deleted it and stranded the jobs
    (found by an admin's side-by-side run)."""
    tokens = server.add_users("resvcarol")
    carol_token = tokens["resvcarol"]
    with server.client() as admin, server.client(carol_token) as carol:
        for name, start in (("soon", time.time() + 3600), ("here", None)):
            admin.create_reservation(
                ReservationCreate(
                    name=name,
                    start_time=start,
                    duration_seconds=600,
                    nodes=["node2" if name == "soon" else "node1"],
                    users=["resvcarol"],
                )
            )

        def job(name: str, seconds: int) -> int:
            spec = JobSubmit(
                script=f"#!/bin/sh\nsleep {seconds}\n",
                workdir=str(tmp_path),
                time_limit_seconds=120,
                reservation=name,
            )
            return carol.submit(spec).job_id

        # the running job runs until cancelled: however slow the commands below are on a
        # loaded machine, it is still in its reservation when they ask
        waiting, running = job("soon", 0), job("here", 100)
        wait_until(lambda: carol.job(running).state == "RUNNING", message="the running job")
        with pytest.raises(Conflict, match=f"Requested reservation is in use: job {waiting} "):
            admin.delete_reservation("soon")
        for word in ("reservationname=soon", "Reservation=here"):
            out = server.cli("scontrol", "delete", word)
            assert out.returncode == 1
            assert out.stderr.startswith(
                f"delete_reservation {word}: Requested reservation is in use"
            )
        assert carol.job(waiting).reservation == "soon" and carol.job(waiting).state == "PENDING"
        assert carol.job(running).reservation == "here"
        assert server.cli("scancel", str(running), token=carol_token).returncode == 0
        wait_until(lambda: carol.job(running).state == "CANCELLED", message="the running job")
        assert server.cli("scontrol", "delete", "Reservation=here").returncode == 0
        out = server.cli("scontrol", "delete", "reservationname=here")
        assert out.returncode == 1
        assert (
            out.stderr
            == "delete_reservation reservationname=here: Requested reservation is invalid\n"
        )
        upd = server.cli("scontrol", "update", "ReservationName=here", "Duration=10")
        assert upd.returncode == 1 and upd.stderr == (
            "Error updating the reservation: Requested reservation is invalid\n"
            "slurm_update error: Requested reservation is invalid\n"
        )
        assert server.cli("scancel", str(waiting), token=carol_token).returncode == 0
        wait_until(lambda: carol.job(waiting).state == "CANCELLED", message="the cancel")
        admin.delete_reservation("soon")


@pytest.mark.parametrize("flags", [[], ["NO_HOLD_JOBS_AFTER_END"]])
def test_a_reservation_that_ends_lets_go_of_its_pending_jobs(
    server: LiveServer, tmp_path: Path, flags: list[str]
) -> None:
    """A one-off reservation ends: slurmctld purges it, and its pending jobs lose it and
    are held with reason ``ReservationDeleted`` — or, with ``NO_HOLD_JOBS_AFTER_END``,
    are free to run anywhere. (HAL kept them waiting for the ended reservation for ever.)
    The job asks two nodes of a one-node reservation: it cannot start inside it."""
    name = "ends" + "".join(f[:2].lower() for f in flags)
    user = "resv" + name
    tokens = server.add_users(user)
    with server.client() as admin, server.client(tokens[user]) as dan:
        admin.create_reservation(
            ReservationCreate(
                name=name, duration_seconds=4, nodes=["node2"], users=[user], flags=flags
            )
        )
        job = dan.submit(
            JobSubmit(
                script="#!/bin/sh\ntrue\n",
                workdir=str(tmp_path),
                time_limit_seconds=2,
                nodes_min=2,
                reservation=name,
            )
        ).job_id
        wait_until(lambda: dan.job(job).reason != "None", message="a pass to judge it")
        assert dan.job(job).state == "PENDING"
        if flags:
            wait_until(lambda: dan.job(job).state == "COMPLETED", message="it to run outside")
            assert dan.job(job).reservation == "" and dan.job(job).nodes == ["node1", "node2"]
        else:
            wait_until(lambda: dan.job(job).reservation == "", message="the reservation's end")
            info = dan.job(job)
            assert (info.state, info.held, info.reason) == ("PENDING", True, "ReservationDeleted")
        assert name not in [r.name for r in admin.reservations()]
        assert server.cli("scontrol", "show", "reservation", name).returncode == 1
        if not flags:
            admin.cancel(job)
