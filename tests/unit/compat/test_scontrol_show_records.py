"""``scontrol show partition`` and ``show node`` in Slurm 22.05.8's keys, order and lines
(docs/slurm-checks.md, "scontrol show partition and node"). What HAL cannot know (Arch,
OS, BootTime, billing ...) stays out; what holds for every HAL partition or node by
construction is printed as Slurm prints it."""

from __future__ import annotations

from compat_fakes import FakeClient, call, node, partition, running

MiB = 1024 * 1024


def test_partition_record_as_slurm_22_05_8() -> None:
    """Slurm 22.05.8 printed for ``PartitionName=other Nodes=localhost MaxTime=60
    DefaultTime=10 PriorityTier=2 MaxNodes=4``: eleven lines of keys (HAL printed six),
    leaving out here GraceTime, DefMemPerNode and the billing TRES."""
    client = FakeClient(
        node_list=[node("n1", memory_bytes=1000 * MiB), node("n2", memory_bytes=1000 * MiB)],
        partition_list=[
            partition(
                "other",
                max_time_seconds=3600,
                default_time_seconds=600,
                max_nodes=4,
                priority_tier=2,
                priority_job_factor=5,
                preempt_mode="REQUEUE",
                nodes=["n1", "n2"],
            )
        ],
    )
    assert call(client, "scontrol", "show", "partition", "other").lines == [
        "PartitionName=other",
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        "   AllocNodes=ALL Default=NO QoS=N/A",
        "   DefaultTime=00:10:00 DisableRootJobs=NO ExclusiveUser=NO Hidden=NO",
        "   MaxNodes=4 MaxTime=01:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
        "   Nodes=n[1-2]",
        "   PriorityJobFactor=5 PriorityTier=2 RootOnly=NO ReqResv=NO OverSubscribe=NO",
        "   OverTimeLimit=NONE PreemptMode=REQUEUE",
        "   State=UP TotalCPUs=4 TotalNodes=2 SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   MaxMemPerNode=UNLIMITED",
        "   TRES=cpu=4,mem=2000M,node=2",
        "",  # (a blank line after every record, as Slurm's)
    ]


def test_partition_without_default_time_or_limits() -> None:
    """``DefaultTime=NONE`` when the partition sets none, though its jobs get MaxTime;
    ``PreemptMode=OFF`` without preemption, as Slurm's ``PreemptType=preempt/none``."""
    client = FakeClient(
        node_list=[node("n1")], partition_list=[partition("debug", default=True, nodes=["n1"])]
    )
    lines = call(client, "scontrol", "show", "partition").lines
    assert "   AllocNodes=ALL Default=YES QoS=N/A" in lines
    assert "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO Hidden=NO" in lines
    assert "   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED" in (
        lines
    )
    assert "   OverTimeLimit=NONE PreemptMode=OFF" in lines


def test_node_record_as_slurm_22_05_8() -> None:
    """An idle two-CPU node: Slurm's lines, without Arch, Version, OS, BootTime and the
    energy lines; a CPUs-only node is two one-core sockets; ``AllocTRES=`` is empty."""
    client = FakeClient(node_list=[node("n1", cpu_load=0.5, free_memory_bytes=900 * MiB)])
    assert call(client, "scontrol", "show", "node", "n1").lines == [
        "NodeName=n1 CoresPerSocket=1",
        "   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.50",
        "   AvailableFeatures=(null)",
        "   ActiveFeatures=(null)",
        "   Gres=(null)",
        "   NodeAddr=n1 NodeHostName=n1",
        "   RealMemory=1000 AllocMem=0 FreeMem=900 Sockets=2 Boards=1",
        "   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        "   Partitions=debug",
        "   LastHeartbeat=Unknown",
        "   CfgTRES=cpu=2,mem=1000M",
        "   AllocTRES=",
        "",
    ]


def test_node_alloc_tres_leaves_out_what_is_not_allocated() -> None:
    """A job of two CPUs and no memory: Slurm prints ``AllocTRES=cpu=2`` (HAL printed
    ``cpu=2,mem=0``, which a TRES parser reads as a memory of zero units)."""
    busy = node("n1", display_state="alloc", cpus_alloc=2)
    with_mem = node("n2", display_state="mix", cpus_alloc=1, memory_alloc_bytes=100 * MiB)
    client = FakeClient(node_list=[busy, with_mem])
    assert "   AllocTRES=cpu=2" in call(client, "scontrol", "show", "node", "n1").lines
    assert "   AllocTRES=cpu=1,mem=100M" in call(client, "scontrol", "show", "node", "n2").lines


def test_job_tres_of_no_memory_has_no_mem_part() -> None:
    """A job that asked for no memory: Slurm 22.05.8 prints ``TRES=cpu=1,node=1,...``
    (on the peer), never ``mem=0``, which HAL printed."""
    client = FakeClient(job_list=[running(7, memory_bytes=0)])
    assert "   TRES=cpu=1,node=1" in call(client, "scontrol", "show", "job", "7").lines


def test_node_states_as_slurm_22_05_8() -> None:
    """A drained node is ``IDLE+DRAIN``, a draining one ``MIXED+DRAIN`` or
    ``ALLOCATED+DRAIN`` (HAL printed DRAINED and DRAINING, Slurm's sinfo words, which a
    script testing for IDLE or MIXED missed); flags follow alphabetically."""

    def state(**changes: object) -> str:
        client = FakeClient(node_list=[node("n1", **changes)])
        (line,) = [x for x in call(client, "scontrol", "show", "node", "n1").lines if "State=" in x]
        return line.split()[0]

    assert state(display_state="drain") == "State=IDLE+DRAIN"
    assert state(display_state="drng", cpus_alloc=1) == "State=MIXED+DRAIN"
    assert state(display_state="drng", cpus_alloc=2) == "State=ALLOCATED+DRAIN"
    assert state(display_state="down") == "State=DOWN"
    flagged = state(display_state="drain", state_flags=["NOT_RESPONDING", "MAINTENANCE"])
    assert flagged == "State=IDLE+DRAIN+MAINTENANCE+NOT_RESPONDING"
