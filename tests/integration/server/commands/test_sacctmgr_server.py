"""``sacctmgr show`` against a live control plane: the accounts, users and QoS of
hal.toml's ``[[accounts]]``/``[[users]]``/``[[qos]]`` in Slurm's layout.

Snakemake's Slurm executor asks ``sacctmgr -nP show user names=$USER
format=defaultaccount`` for the account to charge and ``sacctmgr -n -s list user $USER
format=account%256`` for the accounts a user may name; both must answer from the config.
Changing anything is refused: edit hal.toml and run ``scontrol reconfigure``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hal.config.priority import priority_from_dict
from hal.testing.live import LiveServer

POLICY = priority_from_dict(
    {
        "accounts": [
            {
                "name": "physics",
                "fairshare": 2,
                "grp_jobs": 50,
                "max_jobs": 10,
                "max_wall": "2-0",
                "grp_tres": {"cpus": 512, "gpus": 16, "mem": "2T", "nodes": 32},
            },
            {"name": "lattice", "parent": "physics", "max_submit_jobs": 40},
            {"name": "chem"},
        ],
        "users": [
            {"name": "alice", "default_account": "lattice", "accounts": ["physics"]},
            {"name": "bob", "default_account": "chem", "fairshare": 3},
            {"name": "admin", "default_account": "chem"},
        ],
        "qos": [
            {"name": "normal", "max_jobs_per_user": 4, "max_wall": "1-0"},
            {
                "name": "high",
                "priority": 100,
                "preempt": ["normal"],
                "grace_time": 60,
                "max_tres_per_job": {"cpus": 64, "gpus": 4},
            },
        ],
    }
)
ASSOC_TITLES = [
    "Cluster", "Account", "User", "Partition", "Share", "Priority", "GrpJobs", "GrpTRES",
    "GrpSubmit", "GrpWall", "GrpTRESMins", "MaxJobs", "MaxTRES", "MaxTRESPerNode",
    "MaxSubmit", "MaxWall", "MaxTRESMins", "QOS", "Def QOS", "GrpTRESRunMins",
]  # fmt: skip


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    overrides = {"priority": POLICY, "cluster_name": "lab"}
    with LiveServer(tmp_path_factory.mktemp("hal"), config_overrides=overrides) as server:
        yield server


@pytest.fixture(scope="module")
def alice(live: LiveServer) -> str:
    return live.add_users("alice")["alice"]


def test_snakemake_reads_the_default_account(live: LiveServer, alice: str) -> None:
    out = live.cli("sacctmgr", "-nP", "show", "user", "names=alice", "format=defaultaccount")
    assert (out.returncode, out.stdout, out.stderr) == (0, "lattice\n", "")
    # as alice herself, through her own token (any user may read the associations)
    out = live.cli("sacctmgr", "-nP", "show", "user", "names=alice", "format=defaultaccount",
                   token=alice)  # fmt: skip
    assert (out.returncode, out.stdout) == (0, "lattice\n")


def test_snakemake_lists_the_accounts_a_user_may_name(live: LiveServer) -> None:
    out = live.cli("sacctmgr", "-n", "-s", "list", "user", "alice", "format=account%256")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) == 256 for line in lines)  # right-aligned in the 256 asked for
    assert sorted(line.strip() for line in lines) == ["lattice", "physics"]


def test_show_user_is_slurms_table(live: LiveServer) -> None:
    out = live.cli("sacctmgr", "show", "user")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "      User   Def Acct     Admin",
        "---------- ---------- ---------",
        "     admin       chem Administ+",
        "     alice    lattice      None",
        "       bob       chem      None",
    ]


def test_withassoc_adds_slurms_association_columns(live: LiveServer) -> None:
    out = live.cli("sacctmgr", "-P", "-s", "show", "user", "bob")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "User|Def Acct|Admin|Cluster|Account|Partition|Share|Priority|MaxJobs|MaxNodes|"
        "MaxCPUs|MaxSubmit|MaxWall|MaxCPUMins|QOS|Def QOS",
        "bob|chem|None|lab|chem||3||||||||high,normal|",
    ]
    out = live.cli(
        "sacctmgr", "-nP", "show", "account", "physics", "withassoc",
        "format=account,parentname,user,grpnodes,grpcpus,grpmem,maxjobs",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # the account's own association, then its users'; GrpMem in MiB
    assert out.stdout.splitlines() == ["physics|root||32|512|2097152|10", "physics||alice||||"]
    # (alice's association row shows no parent: Slurm gives only accounts a Par Name)
    out = live.cli("sacctmgr", "-nP", "show", "account", "physics", "-s", "format=user")
    assert out.stdout.splitlines() == ["", "alice"]


def test_show_assoc_has_slurms_columns_and_the_configured_limits(live: LiveServer) -> None:
    out = live.cli("sacctmgr", "show", "assoc")
    assert out.returncode == 0, out.stderr
    header, dashes, *rows = out.stdout.splitlines()
    widths = [len(d) for d in dashes.split(" ")]
    assert widths == [10, 10, 10, 10, 9, 10, 7, 13, 9, 11, 13, 7, 13, 14, 9, 11, 13, 20, 9, 13]
    # titles right-aligned and cut to the width (GrpTRESRunMins shows as GrpTRESRunMin)
    assert header.split() == [*ASSOC_TITLES[:18], "Def", "QOS", "GrpTRESRunMin"]
    assert len(rows) == 8  # root, 3 accounts, 4 user associations

    out = live.cli("sacctmgr", "-P", "show", "assoc", "where", "account=physics")
    assert out.returncode == 0, out.stderr
    titles, *lines = out.stdout.splitlines()
    assert titles.split("|") == ASSOC_TITLES
    found = {
        line.split("|")[2]: dict(zip(ASSOC_TITLES, line.split("|"), strict=True)) for line in lines
    }
    assert set(found) == {"", "alice"}  # the account's own row and alice's association
    physics = found[""]
    assert physics["Cluster"] == "lab"
    assert physics["Share"] == "2"
    assert physics["GrpJobs"] == "50"
    assert physics["MaxJobs"] == "10"
    assert physics["GrpTRES"] == "cpu=512,mem=2T,node=32,gres/gpu=16"
    assert physics["MaxWall"] == "2-00:00:00"
    assert physics["QOS"] == "high,normal"  # every user may use every QoS
    assert found["alice"]["Share"] == "1"
    assert found["alice"]["MaxJobs"] == ""  # HAL has no per-user association limits

    out = live.cli("sacctmgr", "-nP", "show", "assoc", "user=bob", "format=account,user,share")
    assert (out.returncode, out.stdout) == (0, "chem|bob|3\n")


def test_the_tree_indents_accounts_under_their_parents(live: LiveServer) -> None:
    out = live.cli("sacctmgr", "-n", "show", "assoc", "tree", "format=account,user")
    assert out.returncode == 0, out.stderr
    rows = [
        ("root", ""), (" chem", ""), ("  chem", "admin"), ("  chem", "bob"), (" physics", ""),
        ("  physics", "alice"), ("  lattice", ""), ("   lattice", "alice"),
    ]  # fmt: skip
    # Account left-aligned in 20 (indented one space a level), User right-aligned in 10
    assert out.stdout.splitlines() == [f"{a:<20} {u:>10}".rstrip() for a, u in rows]


def test_show_account_and_qos(live: LiveServer) -> None:
    out = live.cli("sacctmgr", "-p", "show", "account", "lattice")
    assert (out.returncode, out.stdout) == (0, "Account|Descr|Org|\nlattice|lattice|physics|\n")

    fields = "format=Name,Priority,MaxWall,MaxTRESPU,MaxJobsPU,Preempt,PreemptMode,GraceTime"
    out = live.cli("sacctmgr", "-nP", "show", "qos", fields)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "normal|0|1-00:00:00||4||cluster|00:00:00",
        "high|100||||normal|cluster|00:01:00",
    ]
    out = live.cli("sacctmgr", "-nP", "show", "qos", "high", "format=name,maxtres")
    assert (out.returncode, out.stdout) == (0, "high|cpu=64,gres/gpu=4\n")


@pytest.mark.parametrize(
    "argv",
    [
        ("add", "user", "carol", "account=chem"),
        ("-i", "modify", "qos", "normal", "set", "priority=10"),
        ("delete", "account", "chem"),
    ],
)
def test_changing_anything_is_refused(live: LiveServer, argv: tuple[str, ...]) -> None:
    out = live.cli("sacctmgr", *argv)
    assert out.returncode == 1
    assert out.stdout == ""
    assert "hal.toml" in out.stderr and "[[accounts]]" in out.stderr
    assert "scontrol reconfigure" in out.stderr and "restart" not in out.stderr


def test_version_is_the_slurm_release_the_commands_copy(live: LiveServer) -> None:
    for argv in (("-V",), ("version",)):
        out = live.cli("sacctmgr", *argv)
        assert out.returncode == 0 and out.stdout == "slurm 22.05.8 (HAL)\n", out
