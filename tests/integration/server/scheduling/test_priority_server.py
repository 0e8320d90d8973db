"""Multifactor priority, fair share, sprio/sshare and explain in the live server.

One 2-CPU agent; users alice (account physics) and bob (account chem), equal shares.
Alice runs a job first, so she has used her share and bob has not: when both wait behind
a blocker, bob's job has the higher fair-share factor, the higher priority, and starts
first once the blocker goes. Usage, and a priority an administrator set, survive a
restart of the control plane."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.client import HalClient
from hal.config.priority import priority_from_dict
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit, JobUpdate

POLICY = priority_from_dict(
    {
        "priority": {
            "weight_age": 100,
            "weight_fairshare": 10_000,
            "weight_job_size": 10,
            "calc_period": 1,
            "decay_half_life": "7-0",
        },
        "accounts": [{"name": "physics"}, {"name": "chem"}],
        "users": [
            {"name": "alice", "default_account": "physics"},
            {"name": "bob", "default_account": "chem"},
        ],
    }
)


class Cluster:
    def __init__(self, live: LiveServer, tokens: dict[str, str]) -> None:
        self.live = live
        self.tokens = tokens

    def client(self, user: str) -> HalClient:
        return self.live.client(self.tokens[user])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("hal")
    overrides = {"kill_wait_seconds": 2, "priority": POLICY}
    live = LiveServer(data, config_overrides=overrides)
    with live:
        tokens = live.add_users("alice", "bob")
        tokens["admin"] = live.token
        with live.agents(1, cpus=2, memory="1G"):
            yield Cluster(live, tokens)


def _job(tmp: Path, script: str, *, cpus: int = 2, limit: int = 120) -> JobSubmit:
    return JobSubmit(
        script=f"#!/bin/sh\n{script}\n",
        workdir=str(tmp),
        time_limit_seconds=limit,
        cpus_per_task=cpus,
    )


def test_fair_share_orders_the_queue_and_sprio_shows_why(cluster: Cluster, tmp_path: Path) -> None:
    with cluster.client("alice") as alice, cluster.client("bob") as bob:
        first = alice.submit(_job(tmp_path, "sleep 1")).job_id
        wait_until(lambda: alice.job(first).state == "COMPLETED", message="alice's first job")
        shares = {(r.account, r.user): r for r in alice.shares().rows}
        assert shares[("physics", "alice")].raw_usage > 0
        assert shares[("physics", "alice")].fairshare < shares[("chem", "bob")].fairshare

        blocker = alice.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        wait_until(lambda: alice.job(blocker).state == "RUNNING", message="the blocker")
        mine = alice.submit(_job(tmp_path, "true")).job_id
        theirs = bob.submit(_job(tmp_path, "true")).job_id

        found = {p.job_id: p for p in alice.priorities().jobs}
        assert found[theirs].normalized.fairshare > found[mine].normalized.fairshare
        assert found[theirs].priority > found[mine].priority
        assert found[theirs].account == "chem"

        out = cluster.live.cli("prio", "-j", str(theirs), token=cluster.tokens["alice"])
        assert out.returncode == 0, out.stderr
        header, line = out.stdout.splitlines()
        # the factors with a weight (no partition or QoS weight here), as Slurm's
        assert header.split() == [
            "JOBID", "PARTITION", "PRIORITY", "SITE", "AGE", "FAIRSHARE", "JOBSIZE",
        ]  # fmt: skip
        assert line.split()[0] == str(theirs)
        assert int(line.split()[2]) == found[theirs].priority

        out = cluster.live.cli("sshare", token=cluster.tokens["bob"])
        assert out.returncode == 0, out.stderr
        users = [ln.split()[1] for ln in out.stdout.splitlines()[2:] if len(ln.split()) == 7]
        assert users == ["bob"]  # without -a: the caller's own associations only

        alice.cancel(blocker)
        wait_until(lambda: bob.job(theirs).state in ("RUNNING", "COMPLETED"), message="bob's")
        assert alice.job(mine).state == "PENDING" or (
            (alice.job(mine).start_time or 0) >= (bob.job(theirs).start_time or 0)
        )
        wait_until(lambda: alice.job(mine).state == "COMPLETED", message="alice's job")


def test_explain_names_the_reason_the_nodes_and_the_queue(cluster: Cluster, tmp_path: Path) -> None:
    with cluster.client("alice") as alice:
        blocker = alice.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        wait_until(lambda: alice.job(blocker).state == "RUNNING", message="the blocker")
        head = alice.submit(_job(tmp_path, "true")).job_id
        second = alice.submit(_job(tmp_path, "true")).job_id
        wait_until(lambda: alice.job(second).reason == "Priority", message="a pass")

        info = alice.explain(second)
        assert info.reason == "Priority"
        assert info.jobs_ahead == 1 and info.ahead_ids == [str(head)]
        assert info.summary == "0/1 nodes available: 1 insufficient cpu"
        assert info.priority is not None and info.fairshare is not None
        assert info.fairshare.account == "physics"

        head_info = alice.explain(head)
        assert head_info.reason == "Resources"
        assert "insufficient cpu" in head_info.detail

        out = cluster.live.cli("explain", str(second), token=cluster.tokens["alice"])
        assert out.returncode == 0, out.stderr
        assert "1 job(s) ahead" in out.stdout
        assert "insufficient cpu  [noderesources]" in out.stdout
        alice.cancel(blocker)
        alice.cancel(head)
        alice.cancel(second)


def test_sshare_tres_run_mins_counts_what_running_jobs_still_hold(
    cluster: Cluster, tmp_path: Path
) -> None:
    """alice's 2-CPU job with 5 minutes of limit holds about 10 CPU-minutes, on her
    association and every account above it; bob's holds nothing (``sshare -o``)."""
    with cluster.client("alice") as alice:
        job = alice.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        try:
            wait_until(lambda: alice.job(job).state == "RUNNING", message="alice's job")
            fields = "Account,User,TRESRunMins"
            out = cluster.live.cli("sshare", "-a", "-n", "-P", "-o", fields)
            assert out.returncode == 0, out.stderr
            tres = {
                tuple(line.split("|")[:2]): dict(
                    item.split("=") for item in line.split("|")[2].split(",")
                )
                for line in out.stdout.splitlines()
            }
            for assoc in (("root", ""), ("physics", ""), ("physics", "alice")):
                assert 8 <= int(tres[assoc]["cpu"]) <= 10, (assoc, tres)
                assert 4 <= int(tres[assoc]["node"]) <= 5 and tres[assoc]["gres/gpu"] == "0"
            assert tres[("chem", "bob")]["cpu"] == "0"
            only = cluster.live.cli("sshare", "-a", "-U", "-n", "-P", "-o", "Account,User")
            assert sorted(only.stdout.splitlines()) == ["chem|bob", "physics|alice"]
        finally:
            alice.cancel(job)
            wait_until(lambda: alice.job(job).state == "CANCELLED", message="the cancel")


def test_sprio_leaves_a_held_job_out_until_it_is_released(cluster: Cluster, tmp_path: Path) -> None:
    """Slurm's sprio skips a held job ("0 means the job is held": its priority is 0, it
    has no factors to weigh) and lists it again once released; HAL listed it with the
    priority it would have had. A blocker keeps it pending once released."""
    held = dataclasses.replace(_job(tmp_path, "true"), hold=True)
    with cluster.client("alice") as alice, _blocked(alice, tmp_path):
        job = alice.submit(held).job_id
        try:
            assert job not in {p.job_id for p in alice.priorities().jobs}
            out = cluster.live.cli("sprio", "-h", "-u", "alice", token=cluster.tokens["alice"])
            assert out.returncode == 0, out.stderr
            assert str(job) not in [line.split()[0] for line in out.stdout.splitlines()]
            out = cluster.live.cli("explain", str(job), token=cluster.tokens["alice"])
            assert "priority: 0 (held; once released: age" in out.stdout, out.stdout
            alice.release(str(job))
            found = {p.job_id: p for p in alice.priorities().jobs}
            assert found[job].priority == alice.job(job).priority > 0
        finally:
            alice.cancel(str(job))


def test_sprio_leaves_a_job_out_until_its_begin_time_comes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Slurm's sprio skips a job whose begin time (``--begin``, ``StartTime=``) is still
    ahead: it is not eligible yet, so it has no priority to break down. Once its begin
    time has come (here ``scontrol update StartTime=now``) it is listed, pending behind a
    blocker. HAL listed it all along."""
    later = dataclasses.replace(_job(tmp_path, "true"), begin_time=4102444800.0)
    with cluster.client("alice") as alice, _blocked(alice, tmp_path):
        job = alice.submit(later).job_id
        try:
            assert job not in {p.job_id for p in alice.priorities().jobs}
            out = cluster.live.cli("sprio", "-h", "-j", str(job), token=cluster.tokens["alice"])
            assert out.returncode == 0, out.stderr  # Slurm's words, also with -h
            assert out.stdout == "Unable to find jobs matching user/id(s) specified\n"
            done = cluster.live.cli(
                "scontrol", "update", f"JobId={job}", "StartTime=now", token=cluster.tokens["alice"]
            )
            assert done.returncode == 0, done.stderr
            assert alice.job(job).state == "PENDING"  # behind the blocker
            assert job in {p.job_id for p in alice.priorities().jobs}
        finally:
            alice.cancel(str(job))


@contextlib.contextmanager
def _blocked(client: HalClient, tmp: Path) -> Iterator[int]:
    """A job holding the node's two CPUs while the block runs (cancelled after it), so
    the jobs the block submits stay pending."""
    blocker = client.submit(_job(tmp, "sleep 300", limit=300)).job_id
    try:
        wait_until(lambda: client.job(blocker).state == "RUNNING", message="the blocker")
        yield blocker
    finally:
        client.cancel(str(blocker))
        wait_until(lambda: client.job(blocker).state == "CANCELLED", message="the cancel")


def test_sprio_leaves_out_a_job_waiting_on_its_dependency_and_zeroes_a_set_priority(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Checked with Slurm 22.05.8 (docs/slurm-checks.md): sprio leaves out a job whose
    dependency is not met (its EligibleTime is Unknown), as it leaves out a held one;
    a job whose priority an administrator set is listed with that priority and every
    factor 0 (``scontrol update jobid=N priority=4242``: ``4242 0 0 0 ...``). HAL listed
    the waiting job, and the set job with the factors it would have had."""
    with cluster.client("alice") as alice, _blocked(alice, tmp_path) as blocker:
        after = dataclasses.replace(_job(tmp_path, "true"), dependency=f"afterok:{blocker}")
        waiting = alice.submit(after).job_id
        pinned = alice.submit(_job(tmp_path, "true")).job_id
        try:
            wait_until(lambda: alice.job(waiting).reason == "Dependency", message="a pass")
            done = cluster.live.cli("scontrol", "update", f"JobId={pinned}", "Priority=4242")
            assert done.returncode == 0, done.stderr
            out = cluster.live.cli("sprio", "-h", "-l", "-u", "alice")
            assert out.returncode == 0, out.stderr
            rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()}
            assert str(waiting) not in rows
            # JOBID PARTITION USER PRIORITY SITE AGE ASSOC FAIRSHARE JOBSIZE PARTITION QOS
            # NICE (TRES blank)
            assert rows[str(pinned)][3:] == ["4242"] + ["0"] * 8
        finally:
            alice.cancel(str(waiting))
            alice.cancel(str(pinned))


def test_an_administrators_priority_and_the_usage_survive_a_restart(
    cluster: Cluster, tmp_path: Path
) -> None:
    with cluster.client("admin") as admin:
        blocker = admin.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        wait_until(lambda: admin.job(blocker).state == "RUNNING", message="the blocker")
        waiting = admin.submit(_job(tmp_path, "true")).job_id
        admin.update_job(waiting, JobUpdate(priority=42))
        before = {(r.account, r.user): r.raw_usage for r in admin.shares().rows}
    assert before[("physics", "alice")] > 0

    cluster.live.stop()
    cluster.live.start()
    with cluster.client("admin") as admin:
        after = {(r.account, r.user): r.raw_usage for r in admin.shares().rows}
        # the same decayed usage, rebuilt from accounting (minus a little decay)
        assert after[("physics", "alice")] == pytest.approx(before[("physics", "alice")], rel=0.01)
        found = {p.job_id: p for p in admin.priorities().jobs}
        assert found[waiting].priority == 42 and found[waiting].fixed
