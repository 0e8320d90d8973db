"""scontrol show/hold/release/requeue/update."""

from __future__ import annotations

from pathlib import Path

import pytest
from compat_fakes import T0, FakeClient, MiB, call, job, node, partition, running

from hal.compat.scontrol_config import ORDER
from hal.wire.nodes import BlockInfo, TopologyInfo


def cluster() -> FakeClient:
    return FakeClient(
        job_list=[
            job(
                2,
                name="failer",
                state="FAILED",
                reason="NonZeroExitCode",
                exit_code=3,
                start_time=T0,
                end_time=T0,
                nodes=["vm"],
            ),
            running(5, array_job_id=4, array_task_id=1, gpus=2, submit_host="login1"),
        ],
        node_list=[node("vm", features=["ssd"], gpus=2, gpu_model="a100", gpus_alloc=2, reason="")],
        partition_list=[partition("debug", default=True, default_time_seconds=600)],
    )


def test_show_job_like_the_reference() -> None:
    lines = call(cluster(), "scontrol", "show", "job", "2").lines
    assert lines[0] == "JobId=2 JobName=failer"
    assert lines[1] == "   UserId=root(0) GroupId=root(0) MCS_label=N/A"
    assert "   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)" in lines
    assert "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0" in lines
    assert "   RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A" in lines
    assert "   TRES=cpu=1,mem=50M,node=1" in lines
    assert lines[-3] == "   StdOut=/home/root/slurm-2.out"
    assert lines[-2] == "   MailUser=(null) MailType=NONE"  # a job without mail settings
    assert lines[-1] == ""  # a blank line after every record, the last too, as Slurm's


def test_show_array_element_and_all_jobs_separated() -> None:
    lines = call(cluster(), "scontrol", "show", "jobs").lines
    assert "JobId=5 ArrayJobId=4 ArrayTaskId=1 JobName=sleeper" in lines
    throttled = running(8, array_job_id=4, array_task_id=2, array_max_running=1)
    (first, *_) = call(FakeClient(job_list=[throttled]), "scontrol", "show", "job", "8").lines
    assert first == "JobId=8 ArrayJobId=4 ArrayTaskId=2 ArrayTaskThrottle=1 JobName=sleeper"
    assert "" in lines
    assert "   Partition=debug AllocNode:Sid=login1:0" in lines


def test_show_job_node_lines_as_slurm_22_05_8() -> None:
    """-w and -x as ReqNodeList/ExcNodeList (between Partition and NodeList); a job without
    nodes has ``NodeList=`` and no BatchHost line (it had ``(null)`` in both)."""
    pending = job(7, req_nodes=["n1", "n2"], exc_nodes=["n4"])
    lines = call(FakeClient(job_list=[pending]), "scontrol", "show", "job", "7").lines
    at = lines.index("   ReqNodeList=n[1-2] ExcNodeList=n4")
    assert lines[at - 1].startswith("   Partition=debug ")
    assert lines[at + 1 : at + 3] == [
        "   NodeList=",
        "   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1",
    ]
    lines = call(cluster(), "scontrol", "show", "job", "5").lines
    assert "   ReqNodeList=(null) ExcNodeList=(null)" in lines
    assert lines.index("   NodeList=vm") + 1 == lines.index("   BatchHost=vm")


def test_show_job_oneliner() -> None:
    (line,) = call(cluster(), "scontrol", "-o", "show", "job", "2").lines
    assert line.startswith("JobId=2 JobName=failer UserId=root(0)")


def test_show_unknown_job() -> None:
    result = call(cluster(), "scontrol", "show", "job", "99")
    assert (result.rc, result.err) == (1, "slurm_load_jobs error: Invalid job id specified\n")


def test_show_node() -> None:
    lines = call(cluster(), "scontrol", "show", "node", "vm").lines
    assert lines[0] == "NodeName=vm CoresPerSocket=1"
    assert "   Gres=gpu:a100:2" in lines
    assert "   AvailableFeatures=ssd" in lines
    assert "   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A" in lines
    assert "   CfgTRES=cpu=2,mem=1000M,gres/gpu=2" in lines
    assert not [line for line in lines if "GresUsed" in line]  # only with -d, as Slurm's


def test_show_node_reason_names_who_and_when() -> None:
    """Slurm 22.05.8: ``Reason=maint window [root@2026-11-26T06:10:01]``; a reason stored
    before HAL recorded who set it and when prints bare, as Slurm's without a time."""
    when = 1795673401.0  # 2026-11-26T06:10:01 UTC
    client = FakeClient(
        node_list=[
            node("vm", reason="maint window", reason_user="root", reason_time=when),
            node("old", reason="fan"),
        ]
    )
    lines = call(client, "scontrol", "show", "node", "vm").lines
    assert lines[-2] == "   Reason=maint window [root@2026-11-26T06:10:01]"
    assert call(client, "scontrol", "show", "node", "old").lines[-2] == "   Reason=fan"


def test_show_node_details_name_the_gpus_in_use() -> None:
    """``scontrol -d show node``: Slurm's ``GresUsed=`` line under ``Gres=``, as sinfo's
    GresUsed prints it; a node without GPUs has none (HAL printed no GresUsed at all)."""
    client = cluster()
    client.node_list[0] = client.node_list[0].model_copy(update={"gpu_ids_alloc": [0, 1]})
    client.node_list.append(node("cpu1"))
    lines = call(client, "scontrol", "-d", "show", "node", "vm").lines
    at = lines.index("   Gres=gpu:a100:2")
    assert lines[at + 1] == "   GresUsed=gpu:a100:2(IDX:0-1)"
    one = call(client, "scontrol", "--details", "-o", "show", "node", "vm").out
    assert " Gres=gpu:a100:2 GresUsed=gpu:a100:2(IDX:0-1) " in one
    cpu = call(client, "scontrol", "-d", "show", "node", "cpu1").lines
    assert "   Gres=(null)" in cpu and not [line for line in cpu if "GresUsed" in line]


def test_show_partition() -> None:
    lines = call(cluster(), "scontrol", "show", "partition").lines
    assert lines[0] == "PartitionName=debug"  # the whole record: test_scontrol_show_records
    assert "   DefaultTime=00:10:00 DisableRootJobs=NO ExclusiveUser=NO Hidden=NO" in lines
    assert "   Nodes=vm" in lines
    assert "   State=UP TotalCPUs=2 TotalNodes=1 SelectTypeParameters=NONE" in lines
    missing = call(cluster(), "scontrol", "show", "partition", "nope")
    assert (missing.rc, missing.out) == (1, "Partition nope not found\n")


def test_show_config() -> None:
    lines = call(cluster(), "scontrol", "show", "config").lines
    assert lines[0] == "Configuration data as of 2026-11-21T21:32:00"
    assert "ClusterName             = hal" in lines
    assert "KillWait                = 30 sec" in lines
    assert "MinJobAge               = 300 sec" in lines
    assert any(line.startswith("SLURM_VERSION           = ") for line in lines)
    # keys as Slurm 22.05.8 names and orders them; the fake is an older
    # server's answer: no SlurmdTimeout or ReturnToService, nor the wrong keys of before
    assert "SelectType              = select/cons_tres" in lines
    assert "PriorityType            = priority/basic" in lines
    assert not any(line.startswith(("SlurmctldTimeout", "SchedulerTimeSlice")) for line in lines)
    keys = [line.split()[0] for line in lines[1:]]
    assert keys == sorted(keys, key=ORDER.index)


def test_show_hostnames() -> None:
    assert call(cluster(), "scontrol", "show", "hostnames", "n[1-3],x").lines == [
        "n1",
        "n2",
        "n3",
        "x",
    ]
    inside = call(
        cluster(), "scontrol", "show", "hostnames", environ={"SLURM_JOB_NODELIST": "g[1-2]"}
    )
    assert inside.lines == ["g1", "g2"]


@pytest.mark.parametrize(
    ("what", "given", "shown"),
    [
        # as Slurm 22.05.8: the order given, repeats kept
        ("hostlist", "n2,n1", ["n[2,1]"]),
        ("hostlist", "n3,n1,n2,n10,a1", ["n[3,1-2,10],a1"]),
        ("hostlist", "n1,n1,n2", ["n[1,1-2]"]),
        ("hostlist", "n1 n2  n3", ["n[1-3]"]),
        ("hostlist", "n1\nn2\nn3\n", ["n[1-3]"]),  # (a traceback before)
        ("hostlist", "node01,node02,node10", ["node[01-02,10]"]),
        ("hostlistsorted", "n3,n1,n2,n10,a1", ["a1,n[1-3,10]"]),
        ("hostnames", "n[2,1,1]", ["n2", "n1", "n1"]),
        ("hostnames", "n1 n2", ["n1", "n2"]),
    ],
)
def test_show_hostlist_as_slurm(what: str, given: str, shown: list[str]) -> None:
    assert call(cluster(), "scontrol", "show", what, given).lines == shown


@pytest.mark.parametrize(
    "argv",
    [
        ["sho", "job", "2"],
        ["show", "jobid", "2"],
        ["show", "jobid", "-dd", "2"],
        ["-dd", "show", "job", "2"],
        ["show", "job=2"],
        ["show", "jobid=2"],
        ["show", "j", "2"],
        ["SHOW", "JOB", "2"],
    ],
)
def test_keywords_may_be_abbreviated_as_slurm_takes_them(argv: list[str]) -> None:
    """Slurm's scontrol takes any long enough abbreviation (`show jobid -dd N` is in
    many site docs); HAL took only the full words."""
    wanted = call(cluster(), "scontrol", "show", "job", "2").lines
    done = call(cluster(), "scontrol", *argv)
    assert (done.rc, done.lines) == (0, wanted)


def test_abbreviated_commands_and_things_to_show() -> None:
    client = cluster()
    assert call(client, "scontrol", "rel", "2").rc == 0
    assert call(client, "scontrol", "requeueh", "2").rc == 0
    assert client.actions[-2:] == [("release", "2"), ("requeuehold", "2")]
    assert (
        call(cluster(), "scontrol", "show", "part").lines
        == call(cluster(), "scontrol", "show", "partition").lines
    )
    assert call(cluster(), "scontrol", "show", "conf").lines[0].startswith("Configuration data")
    assert call(cluster(), "scontrol", "s", "job", "2").rc == 1  # too short: as Slurm's


def test_show_an_empty_hostlist() -> None:
    done = call(cluster(), "scontrol", "show", "hostnames", environ={})
    assert (done.rc, done.err) == (0, "scontrol: error: host list is empty\n")


def test_hold_release_requeue() -> None:
    client = cluster()
    assert call(client, "scontrol", "hold", "2,5").rc == 0
    assert call(client, "scontrol", "release", "2").rc == 0
    assert call(client, "scontrol", "requeue", "JobId=5").rc == 0
    assert call(client, "scontrol", "uhold", "2").rc == 0  # a hold the owner may release
    assert call(client, "scontrol", "requeuehold", "5").rc == 0
    assert client.actions == [
        ("hold", "2"),
        ("hold", "5"),
        ("release", "2"),
        ("requeue", "5"),
        ("uhold", "2"),
        ("requeuehold", "5"),
    ]
    special = call(client, "scontrol", "requeuehold", "State=SpecialExit", "5")
    assert special.rc == 1 and "SpecialExit is not supported" in special.err
    missing = call(client, "scontrol", "hold", "77")
    assert (missing.rc, missing.err) == (1, "Invalid job id specified for job 77\n")


def test_write_batch_script(tmp_path: Path) -> None:
    """Slurm 22.05.8's words and exit codes (HAL refused ``write``)."""
    client = cluster()
    done = call(client, "scontrol", "write", "batch_script", "2", cwd=str(tmp_path))
    assert (done.rc, done.out) == (0, "batch script for job 2 written to slurm-2.sh\n")
    assert (tmp_path / "slurm-2.sh").read_text() == "#!/bin/sh\necho 2\n"
    named = call(client, "scontrol", "write", "batch_script", "2", "x.sh", cwd=str(tmp_path))
    assert named.out == "batch script for job 2 written to x.sh\n"
    assert (tmp_path / "x.sh").exists()
    assert call(client, "scontrol", "write", "batch_script", "2", "-").out == "#!/bin/sh\necho 2\n"
    missing = call(client, "scontrol", "write", "batch_script", "77")
    assert (missing.rc, missing.err) == (
        0,
        "job script retrieval failed: Invalid job id specified\n",
    )
    bogus = call(client, "scontrol", "write", "bogus", "2")
    assert (bogus.rc, bogus.err) == (1, "invalid write argument:bogus\n")


def test_suspend_and_resume() -> None:
    client = cluster()
    assert call(client, "scontrol", "suspend", "2").rc == 0
    assert call(client, "scontrol", "resume", "JobId=2").rc == 0
    assert client.actions == [("suspend", "2"), ("resume", "2")]


def test_update_job_both_spellings() -> None:
    client = cluster()
    assert call(client, "scontrol", "update", "JobId=2", "TimeLimit=2:00:00", "Nice=5").rc == 0
    assert call(client, "scontrol", "update", "job", "5", "Priority=9", "JobName=x").rc == 0
    (first_id, first), (second_id, second) = client.updates
    assert (first_id, first.time_limit_seconds, first.nice) == ("2", 7200, 5)
    assert (second_id, second.priority, second.name) == ("5", 9, "x")


def test_update_refuses_unknown_keys() -> None:
    result = call(cluster(), "scontrol", "update", "JobId=2", "Licenses=x")
    assert result.rc == 1
    assert "Update of Licenses is not supported by HAL" in result.err
    assert "TimeLimit" in result.err


def test_update_needs_job_and_changes() -> None:
    """No entity named (``TimeLimit=5`` alone, ``Nodes=vm``): Slurm 22.05.8's refusal."""
    for words in (["TimeLimit=5"], ["Nodes=vm", "State=RESUME"]):
        result = call(cluster(), "scontrol", "update", *words)
        assert (result.rc, result.out) == (1, "")
        assert result.err == (
            "No valid entity in update command\n"
            'Input line must include "NodeName", "PartitionName", "Reservation", "JobId", '
            'or "SlurmctldDebug"\n'
        )
    assert "nothing to update" in call(cluster(), "scontrol", "update", "JobId=2").err


def test_update_reads_a_pending_jobs_shape_and_files_as_sbatch_does() -> None:
    """NumNodes, NumTasks, MinMemoryCPU, WorkDir (relative to scontrol's directory),
    StdErr, MailType and Requeue, as Slurm 22.05.8 takes them (HAL refused each)."""
    client = cluster()
    words = ["NumNodes=1-2", "NumTasks=3", "MinMemoryCPU=1G", "WorkDir=sub", "StdErr=e.txt"]
    words += ["MailType=END,FAIL", "Requeue=0"]
    done = call(client, "scontrol", "update", "JobId=2", *words, cwd="/home/a")
    assert done.rc == 0, done.err
    update = client.updates[-1][1]
    assert (update.nodes_min, update.nodes_max, update.ntasks) == (1, 2, 3)
    assert update.memory_per_cpu_bytes == 1 << 30
    assert (update.workdir, update.stderr) == ("/home/a/sub", "e.txt")
    assert update.mail_type and update.requeue is False
    bad = call(client, "scontrol", "update", "JobId=2", "NumTasks=0")
    assert bad.rc == 1 and "NumTasks needs a positive count" in bad.err


def test_relative_time_limit_needs_a_limit_to_move() -> None:
    """(The move itself: test_pending_update_server.py.)"""
    done = call(cluster(), "scontrol", "update", "JobId=2", "TimeLimit=+5")
    assert done.rc == 1 and "job 2 has no time limit to move" in done.err


def test_update_bad_time_limit_quotes_it_whole() -> None:
    for value in ("1-x", "2:xx:00", "1:2:3:4"):
        result = call(cluster(), "scontrol", "update", "JobId=2", f"TimeLimit={value}")
        assert result.rc == 1
        assert f"invalid TimeLimit value '{value}': write minutes (30), MM:SS" in result.err
        assert "D-HH:MM:SS" in result.err and "0/UNLIMITED for no limit" in result.err
    client = cluster()
    assert call(client, "scontrol", "update", "JobId=2", "TimeLimit=UNLIMITED").rc == 0
    assert client.updates[0][1].time_limit_seconds == 0


def test_unknown_command_and_entity() -> None:
    assert "invalid command 'reboot'" in call(cluster(), "scontrol", "reboot").err
    assert "cannot show 'frontend'" in call(cluster(), "scontrol", "show", "frontend").err
    assert call(cluster(), "scontrol").rc == 1


def test_update_node_state_as_hal_drain() -> None:
    """`scontrol update NodeName=... State=...` sends what `hal drain` / `hal resume` send."""
    client = cluster()
    client.node_list.append(node("n2", state="DRAIN", display_state="drain", reason="disk"))
    words = ("update", "NodeName=vm", "State=drain", "Reason=disk errors")
    result = call(client, "scontrol", *words)
    assert (result.rc, result.out, result.err) == (0, "", "")
    assert call(client, "scontrol", "update", "NodeName=vm,n2", "State=DOWN", "Reason=x").rc == 0
    assert call(client, "scontrol", "update", "NodeName=n2", "State=RESUME").rc == 0
    # UNDRAIN resumes a drained node only; vm is not drained in the fake
    assert call(client, "scontrol", "update", "NodeName=vm,n2", "State=UNDRAIN").rc == 0
    assert client.node_updates == [
        ("vm", "DRAIN", "disk errors"),
        ("vm", "DOWN", "x"),
        ("n2", "DOWN", "x"),
        ("n2", "RESUME", ""),
        ("n2", "RESUME", ""),
    ]


def test_update_node_power_down_and_up_are_sent_as_they_are() -> None:
    """Slurm's state=power_down / power_up (any case), no reason needed: the server's
    power saving carries them out (docs/admin/power.md)."""
    client = cluster()
    assert call(client, "scontrol", "update", "NodeName=vm", "State=power_down").rc == 0
    assert call(client, "scontrol", "update", "Node=vm", "State=POWER_UP").rc == 0
    assert client.node_updates == [("vm", "POWER_DOWN", ""), ("vm", "POWER_UP", "")]


def test_update_node_refusals() -> None:
    """Each refusal worded as Slurm 22.05.8's, HAL's hint on a later line."""
    client = cluster()
    for state in ("DRAIN", "DOWN"):
        result = call(client, "scontrol", "update", "NodeName=vm", f"State={state}")
        assert result.rc == 1
        assert result.err == (
            "You must specify a reason when DOWNING or DRAINING a node. Request denied\n"
        )
    for state in ("FUTURE", "fail", "NoResp", "power_down_asap", "POWER_DOWN_FORCE"):
        other = call(client, "scontrol", "update", "NodeName=vm", f"State={state}", "Reason=x")
        assert other.rc == 1
        assert other.err.splitlines()[0] == "slurm_update error: Invalid node state specified"
    bogus = call(client, "scontrol", "update", "nodename=vm", "state=bogus")
    assert (bogus.rc, bogus.out) == (1, "")
    assert bogus.err.splitlines() == [
        "Invalid input: state=bogus",
        "Request aborted",
        "Valid states are: NoResp DRAIN FAIL FUTURE RESUME POWER_DOWN POWER_UP UNDRAIN",
        "Not all states are valid given a node's prior state",
    ]
    unknown = call(client, "scontrol", "update", "NodeName=vm,zz", "State=DRAIN", "Reason=x")
    assert unknown.rc == 1
    assert unknown.err.splitlines()[0] == "slurm_update error: Invalid node name specified"
    assert "no node named zz" in unknown.err
    weight = call(client, "scontrol", "update", "NodeName=vm", "Weight=2")
    assert (weight.rc, "Update of node Weight is not supported by HAL" in weight.err) == (1, True)
    key = call(client, "scontrol", "update", "NodeName=vm", "bogus=1")
    assert (key.rc, key.err) == (
        1,
        "Update of this parameter is not supported: bogus=1\nRequest aborted\n",
    )
    nothing = call(client, "scontrol", "update", "NodeName=vm")
    assert (nothing.rc, nothing.err) == (1, "No changes specified\n")
    assert client.node_updates == []


def test_show_topology_of_blocks() -> None:
    """A topology of blocks only (topology/block): one line per base block, its index
    and the base block size; a node name shows its block."""
    g = [f"g{i}" for i in range(8)]
    client = cluster()
    client.topology_info = TopologyInfo(
        configured=True,
        blocks=[
            BlockInfo(name="b0", nodes=g[:4], nodes_free=4),
            BlockInfo(name="b1", nodes=g[4:], nodes_free=0),
        ],
        block_sizes=[4, 8],
    )
    assert call(client, "scontrol", "show", "topology").lines == [
        "BlockName=b0 BlockIndex=0 Nodes=g[0-3] BlockSize=4",
        "BlockName=b1 BlockIndex=1 Nodes=g[4-7] BlockSize=4",
    ]
    assert call(client, "scontrol", "show", "topology", "g5").lines == [
        "BlockName=b1 BlockIndex=1 Nodes=g[4-7] BlockSize=4"
    ]
    missing = call(client, "scontrol", "show", "topology", "g[3-4]")
    assert (missing.rc, missing.err) == (
        1,
        "scontrol: error: Topology information contains no block or node named g[3-4]\n",
    )


def test_all_of_the_nodes_memory_shows_as_the_zero_asked() -> None:
    """Slurm 22.05.8: a job of ``--mem=0`` or ``--mem-per-cpu=0`` shows
    ``MinMemoryNode=0`` (and squeue's MIN_MEMORY ``0``), its TRES the node's memory; HAL
    showed the node's memory in both."""
    whole = running(9, cpus=2, memory_bytes=2000 * MiB, memory_whole_node=True)
    client = FakeClient(job_list=[whole])
    lines = call(client, "scontrol", "show", "job", "9").lines
    assert "   TRES=cpu=2,mem=2000M,node=1" in lines
    assert "   MinCPUsNode=1 MinMemoryNode=0 OverSubscribe=OK Licenses=(null)" in lines
    assert call(client, "squeue", "-h", "-o", "%m").lines == ["0"]


def test_an_allocation_salloc_made_shows_batch_flag_0() -> None:
    """Slurm 22.05.8: ``BatchFlag=0`` for salloc's job, 1 for sbatch's."""
    client = FakeClient(job_list=[running(9, interactive=True), running(10)])
    assert "   Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0" in (
        call(client, "scontrol", "show", "job", "9").lines
    )
    assert "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0" in (
        call(client, "scontrol", "show", "job", "10").lines
    )


def test_a_partition_update_changes_the_partition() -> None:
    """`scontrol update PartitionName=batch State=DOWN` was refused ("HAL's partitions are
    hal.toml's"); it changes the partition at run time now, silently as Slurm's
    (``hal.compat.scontrol_partition``)."""
    c = cluster()
    c.partition_list = [partition("batch")]
    done = call(c, "scontrol", "update", "PartitionName=batch", "State=DOWN", "MaxTime=60")
    assert (done.rc, done.out, done.err) == (0, "", "")
    assert c.partition_updates == [("batch", {"state": "DOWN", "max_time_seconds": 3600})]
