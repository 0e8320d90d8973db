"""``GET /v1/limits``' body: each QoS and account with limits, used against its caps as the
limits plugin counts (an account counts its sub-accounts' jobs)."""

from __future__ import annotations

from hal.api.limits import limit_list
from hal.config.priority import priority_from_dict
from hal.testing.builders import make_job

POLICY = priority_from_dict(
    {
        "priority": {"weight_fairshare": 1000},
        "accounts": [
            {"name": "physics", "grp_jobs": 10, "grp_tres": {"cpus": 64, "gpus": 4}},
            {"name": "lattice", "parent": "physics", "max_jobs": 2},
            {"name": "chemistry"},
        ],
        "users": [
            {"name": "alice", "default_account": "lattice"},
            {"name": "bob", "default_account": "chemistry"},
        ],
        "qos": [
            {"name": "normal"},
            {"name": "small", "max_jobs_per_user": 1, "max_wall": "1:00:00"},
        ],
    }
)


def test_limits_show_caps_and_what_running_jobs_hold() -> None:
    running = [
        make_job(1).user("alice").cpus(4).qos("small").running_on("n1", start=0.0).build(),
        make_job(2).user("alice").cpus(8).running_on("n2", start=0.0).build(),
        make_job(3).user("bob").cpus(16).running_on("n3", start=0.0).build(),
        make_job(4).user("alice").cpus(2).build(),  # pending: holds nothing
    ]
    rows = {(r.kind, r.name): r for r in limit_list(POLICY, running).limits}
    # unlimited QoS normal and account chemistry are not listed
    assert set(rows) == {("qos", "small"), ("account", "physics"), ("account", "lattice")}
    small = rows[("qos", "small")]
    assert (small.max_jobs_per_user, small.max_wall_seconds) == (1, 3600)
    assert (small.running_jobs, small.used.cpus, small.running_by_user) == (1, 4, {"alice": 1})
    physics = rows[("account", "physics")]  # alice's two jobs through lattice, not bob's
    assert (physics.grp_jobs, physics.grp_tres.cpus, physics.grp_tres.gpus) == (10, 64, 4)
    assert (physics.running_jobs, physics.used.cpus, physics.used.nodes) == (2, 12, 2)
    lattice = rows[("account", "lattice")]
    assert (lattice.parent, lattice.max_jobs_per_user, lattice.running_by_user) == (
        "physics",
        2,
        {"alice": 2},
    )


def test_account_rows_show_per_job_and_submit_limits() -> None:
    """An account with only a submit limit is listed (it is enforced, at submit), with
    its MaxSubmitJobs and GrpSubmitJobs; MaxTRES and MaxWall show as the QoS's do."""
    policy = priority_from_dict(
        {
            "accounts": [
                {"name": "physics", "max_tres_per_job": {"gpus": 2, "mem": 1024}, "max_wall": 600},
                {"name": "lattice", "parent": "physics", "max_submit_jobs": 3},
                {"name": "chemistry", "grp_submit_jobs": 9},
            ],
        }
    )
    rows = {r.name: r for r in limit_list(policy, []).limits}
    assert set(rows) == {"physics", "lattice", "chemistry"}
    physics = rows["physics"]
    assert physics.max_tres_per_job is not None
    assert (physics.max_tres_per_job.gpus, physics.max_tres_per_job.memory_bytes) == (2, 1 << 30)
    assert (physics.max_tres_per_job.cpus, physics.max_wall_seconds) == (None, 600)
    assert (rows["lattice"].max_submit_jobs_per_user, rows["lattice"].grp_submit_jobs) == (3, None)
    assert (rows["chemistry"].max_submit_jobs_per_user, rows["chemistry"].grp_submit_jobs) == (
        None,
        9,
    )
