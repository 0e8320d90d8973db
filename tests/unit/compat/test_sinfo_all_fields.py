"""sinfo's ``%all`` / ``-O All`` and the letters and ``-O`` names HAL lacked, ``-r``/``-d``,
as Slurm 22.05.8 printed them (docs/slurm-checks.md, "sinfo's letters, -r and -d")."""

from __future__ import annotations

from compat_fakes import FakeClient, call, node, partition

# Slurm 22.05.8's `sinfo -o %all` title row, as printed
ALL_TITLES = (
    "AVAIL|ACTIVE_FEATURES|CPUS|TMP_DISK|FREE_MEM|AVAIL_FEATURES|GROUPS|OVERSUBSCRIBE|"
    "TIMELIMIT|MEMORY|HOSTNAMES|NODE_ADDR|PRIO_TIER|ROOT|JOB_SIZE|STATE|USER|VERSION|WEIGHT|"
    "S:C:T|NODES(A/I) |MAX_CPUS_PER_NODE |CPUS(A/I/O/T) |NODES |REASON |NODES(A/I/O/T) |GRES "
    "|TIMESTAMP |PRIO_JOB_FACTOR |DEFAULTTIME |PREEMPT_MODE |NODELIST |CPU_LOAD |PARTITION "
    "|PARTITION |ALLOCNODES |STATE |USER |CLUSTER |SOCKETS |CORES |THREADS "
)


def cluster() -> FakeClient:
    return FakeClient(
        node_list=[
            node("n1", cpu_load=1.21, free_memory_bytes=21581 * 1024 * 1024),
            node("n2", display_state="idle", state_flags=["NOT_RESPONDING"]),
        ],
        partition_list=[
            partition(
                "other",
                max_time_seconds=3600,
                default_time_seconds=600,
                max_nodes=4,
                priority_tier=2,
                priority_job_factor=3,
                nodes=["n1"],
            )
        ],
    )


def test_all_prints_every_letter_as_slurm() -> None:
    """``sinfo -o %all`` printed ``AVAILll`` (``%a`` and the text ``ll``); ``-O All`` was
    refused. Slurm's row for a partition like ``other`` (its node named n1)."""
    for argv in (["-o", "%all"], ["-O", "All"]):
        lines = call(cluster(), "sinfo", *argv, "-p", "other").lines
        assert lines == [
            ALL_TITLES,
            "up|(null)|2|0|21581|(null)|all|NO|1:00:00|1000|n1|n1|2|no|1-4|idle|Unknown|N/A|1|"
            "2:1:1|0/1 |UNLIMITED |0/2/0/2 |1 |none |0/1/0/1 |(null) |Unknown |3 |10:00 |OFF "
            "|n1 |1.21 |other |other |all |idle |Unknown |N/A |2 |1 |1 ",
        ]


def test_priority_letters_as_slurm() -> None:
    """``%I`` is PRIO_JOB_FACTOR and ``%p`` PRIO_TIER (HAL printed the tier under ``%I``
    and refused ``%p``), so ``-O PriorityTier`` is the tier."""
    out = call(cluster(), "sinfo", "-h", "-o", "%I %p %M").lines
    assert out == ["3 2 OFF"]
    lines = call(cluster(), "sinfo", "-O", "PriorityJobFactor:6,PriorityTier:.10,PreemptMode").lines
    assert lines == [
        "PRIO_J PRIO_TIERPREEMPT_MODE        ",
        "3              2OFF                 ",
    ]


def test_letters_and_names_hal_refused() -> None:
    """Each was refused, failing the whole format: ``%b %B %S %V %X %Y %Z`` and the -O
    names ``Cores Sockets Threads MaxCPUsPerNode AllocNodes Cluster StateComplete``."""
    fmt = "%b|%B|%S|%V|%X|%Y|%Z|%h"
    lines = call(cluster(), "sinfo", "-p", "other", "-o", fmt).lines
    assert lines == [
        "ACTIVE_FEATURES|MAX_CPUS_PER_NODE|ALLOCNODES|CLUSTER|SOCKETS|CORES|THREADS|OVERSUBSCRIBE",
        "(null)|UNLIMITED|all|N/A|2|1|1|NO",
    ]
    names = "Sockets:4,Cores:4,Threads:4,MaxCPUsPerNode:10,AllocNodes:4,Cluster:4,StateComplete"
    rows = call(cluster(), "sinfo", "-h", "-p", "other", "-O", names).lines
    assert rows == ["2   1   1   UNLIMITED all N/A idle                "]


def test_responding_and_dead_nodes() -> None:
    """``-r`` lists only nodes that answer, ``-d`` only those that do not (both were
    refused as unknown options)."""
    client = cluster()
    client.partition_list = [partition("debug", default=True, nodes=["n1", "n2"])]
    assert call(client, "sinfo", "-h", "-N", "-r", "-o", "%N").lines == ["n1"]
    assert call(client, "sinfo", "-h", "-N", "--dead", "-o", "%N %t").lines == ["n2 idle*"]
    assert call(client, "sinfo", "-h", "-d", "-o", "%D %N").lines == ["1 n2"]
