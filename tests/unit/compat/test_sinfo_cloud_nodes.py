"""``[cloud]`` group nodes in sinfo and scontrol, as Slurm 22.05.8 shows its cloud nodes.

The expected lines are what the Slurm peer printed (``hal.bench.slurm_peer`` with
``NodeName=cloud[1-2] State=CLOUD CPUs=4 RealMemory=2000 Feature=cloud,c7i``, the same
``cloud[3-4]`` with ``Gres=gpu:a100:2``, before ``localhost``, and
``ResumeProgram``/``SuspendProgram=/bin/true``, ``PrivateData=cloud``): a node not
powered up is ``idle~`` (``IDLE+CLOUD+POWERED_DOWN``), one powering up ``idle#``
(``IDLE+CLOUD+NOT_RESPONDING+POWERING_UP``), one powering down ``idle%``, a registered
one plain ``idle``/``mix`` with the ``CLOUD`` flag. HAL's node lines leave out what
Slurm's agents report and HAL's do not (BootTime, energy), as for any node.
"""

from __future__ import annotations

from typing import Any

import pytest
from compat_fakes import FakeClient, call, node, partition

from hal.wire.nodes import NodeInfo

MiB = 1024 * 1024
DOWN = ["CLOUD", "POWERED_DOWN"]
UP = ["CLOUD", "NOT_RESPONDING", "POWERING_UP"]
GOING = ["CLOUD", "POWERING_DOWN"]


def cloud(name: str, flags: list[str], **changes: Any) -> NodeInfo:
    base: dict[str, Any] = {
        "cpus": 4,
        "memory_bytes": 2000 * MiB,
        "features": ["cloud", "c7i"],
        "state_flags": flags,
    }
    if name in ("cloud3", "cloud4"):
        base |= {"gpus": 2, "gpu_model": "a100"}
    return node(name, **(base | changes))


def peer(*nodes: NodeInfo) -> FakeClient:
    localhost = node("localhost", cpus=4, memory_bytes=23593 * MiB, address="127.0.0.1")
    listed = sorted([*nodes, localhost], key=lambda n: n.name)
    return FakeClient(
        node_list=listed,
        partition_list=[partition("debug", default=True, nodes=[n.name for n in listed])],
    )


def powered_down() -> FakeClient:
    """Nothing powered up (the peer before any job)."""
    return peer(*(cloud(f"cloud{i}", DOWN) for i in range(1, 5)))


def one_powering_up() -> FakeClient:
    """``scontrol update nodename=cloud2 state=power_up`` on the peer."""
    return peer(
        cloud("cloud1", DOWN), cloud("cloud2", UP), cloud("cloud3", DOWN), cloud("cloud4", DOWN)
    )


def test_sinfo_lists_powered_down_cloud_nodes_as_idle_tilde() -> None:
    assert call(powered_down(), "sinfo").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      4  idle~ cloud[1-4]",
        "debug*       up   infinite      1   idle localhost",
    ]
    assert call(powered_down(), "sinfo", "-o", "%N %t %T %c %m %f %G %z %E").lines == [
        "NODELIST STATE STATE CPUS MEMORY AVAIL_FEATURES GRES S:C:T REASON",
        "cloud[1-2] idle~ idle~ 4 2000 cloud,c7i (null) 4:1:1 none",
        "cloud[3-4] idle~ idle~ 4 2000 cloud,c7i gpu:a100:2 4:1:1 none",
        "localhost idle idle 4 23593 (null) (null) 4:1:1 none",
    ]
    # powered down nodes are idle ones for the counts
    assert call(powered_down(), "sinfo", "-s").lines == [
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST",
        "debug*       up   infinite          0/5/0/5 cloud[1-4],localhost",
    ]
    assert call(powered_down(), "sinfo", "-h", "-o", "%N %A %F %C").lines == [
        "cloud[1-4],localhost 0/5 0/5/0/5 0/20/0/20"
    ]


def test_sinfo_node_long_view_of_powered_down_nodes() -> None:
    lines = call(powered_down(), "sinfo", "-N", "-l").lines
    assert lines[1:] == [
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE "
        "REASON              ",
        "cloud1         1    debug*       idle~ 4       4:1:1   2000        0      1 cloud,c7 "
        "none                ",
        "cloud2         1    debug*       idle~ 4       4:1:1   2000        0      1 cloud,c7 "
        "none                ",
        "cloud3         1    debug*       idle~ 4       4:1:1   2000        0      1 cloud,c7 "
        "none                ",
        "cloud4         1    debug*       idle~ 4       4:1:1   2000        0      1 cloud,c7 "
        "none                ",
        "localhost      1    debug*        idle 4       4:1:1  23593        0      1   (null) "
        "none                ",
    ]


def test_a_node_powering_up_is_idle_hash_and_sorts_first() -> None:
    assert call(one_powering_up(), "sinfo").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      1  idle# cloud2",
        "debug*       up   infinite      3  idle~ cloud[1,3-4]",
        "debug*       up   infinite      1   idle localhost",
    ]
    assert call(one_powering_up(), "sinfo", "-o", "%N %t %T %c %m %f %G %z %E").lines == [
        "NODELIST STATE STATE CPUS MEMORY AVAIL_FEATURES GRES S:C:T REASON",
        "cloud2 idle# idle# 4 2000 cloud,c7i (null) 4:1:1 none",
        "cloud1 idle~ idle~ 4 2000 cloud,c7i (null) 4:1:1 none",
        "cloud[3-4] idle~ idle~ 4 2000 cloud,c7i gpu:a100:2 4:1:1 none",
        "localhost idle idle 4 23593 (null) (null) 4:1:1 none",
    ]
    assert call(
        one_powering_up(),
        "sinfo",
        "-O",
        "NodeList:12,StateCompact:10,StateLong:10,StateComplete:60",
    ).lines == [
        "NODELIST    STATE     STATE     STATECOMPLETE" + " " * 47,
        "cloud2      idle#     idle#     idle+cloud+not_responding+powering_up" + " " * 23,
        "cloud[1,3-4]idle~     idle~     idle+cloud+powered_down" + " " * 37,
        "localhost   idle      idle      idle" + " " * 56,
    ]


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ("cloud", ["debug*       up   infinite      1  idle# cloud2",
                   "debug*       up   infinite      3  idle~ cloud[1,3-4]"]),
        ("CLOUD", ["debug*       up   infinite      1  idle# cloud2",
                   "debug*       up   infinite      3  idle~ cloud[1,3-4]"]),
        ("powering_up", ["debug*       up   infinite      1  idle# cloud2"]),
        ("powered_down", ["debug*       up   infinite      3  idle~ cloud[1,3-4]"]),
        ("idle", ["debug*       up   infinite      1  idle# cloud2",
                  "debug*       up   infinite      3  idle~ cloud[1,3-4]",
                  "debug*       up   infinite      1   idle localhost"]),
        ("power_down", ["debug*       up   infinite      0    n/a "]),
    ],
)  # fmt: skip
def test_state_filters_name_the_cloud_flags(states: str, expected: list[str]) -> None:
    assert call(one_powering_up(), "sinfo", "-h", "-t", states).lines == expected


def test_a_node_powering_up_is_not_responding_one_powered_down_is() -> None:
    """``-d`` lists the node powering up only (Slurm: NOT_RESPONDING is on it), ``-r`` the
    others; ``-R`` none (no reason, not down or drained)."""
    assert call(one_powering_up(), "sinfo", "-h", "-d").lines == [
        "debug*       up   infinite      1  idle# cloud2"
    ]
    assert call(one_powering_up(), "sinfo", "-h", "-r").lines == [
        "debug*       up   infinite      3  idle~ cloud[1,3-4]",
        "debug*       up   infinite      1   idle localhost",
    ]
    assert call(one_powering_up(), "sinfo", "-R").lines == [
        "REASON               USER      TIMESTAMP           NODELIST"
    ]


def test_a_registered_cloud_node_shows_no_suffix_and_powering_down_a_percent() -> None:
    client = peer(
        cloud("cloud1", ["CLOUD"], display_state="mix", cpus_alloc=1),
        cloud("cloud2", GOING),
        cloud("cloud3", ["CLOUD"]),
        cloud("cloud4", DOWN),
    )
    assert call(
        client,
        "sinfo",
        "-N",
        "-h",
        "-O",
        "NodeList:12,StateCompact:10,StateLong:10,StateComplete:60",
    ).lines == [
        "cloud1      mix       mixed     mixed+cloud" + " " * 49,
        "cloud2      idle%     idle%     idle+cloud+powering_down" + " " * 36,
        "cloud3      idle      idle      idle+cloud" + " " * 50,
        "cloud4      idle~     idle~     idle+cloud+powered_down" + " " * 37,
        "localhost   idle      idle      idle" + " " * 56,
    ]
    assert call(client, "sinfo").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      1  idle% cloud2",
        "debug*       up   infinite      1  idle~ cloud4",
        "debug*       up   infinite      1    mix cloud1",
        "debug*       up   infinite      2   idle cloud3,localhost",
    ]


@pytest.mark.parametrize(
    ("flags", "changes", "state"),
    [
        (DOWN, {}, "IDLE+CLOUD+POWERED_DOWN"),
        (UP, {}, "IDLE+CLOUD+NOT_RESPONDING+POWERING_UP"),
        (GOING, {}, "IDLE+CLOUD+POWERING_DOWN"),
        (["CLOUD"], {}, "IDLE+CLOUD"),
        (["CLOUD"], {"display_state": "mix", "cpus_alloc": 1}, "MIXED+CLOUD"),
        # the peer's node that registered without its GPUs: CLOUD before DRAIN
        (["CLOUD"], {"display_state": "drng", "cpus_alloc": 1}, "MIXED+CLOUD+DRAIN"),
        (
            ["CLOUD", "NOT_RESPONDING"],
            {"display_state": "drain"},
            "IDLE+CLOUD+DRAIN+NOT_RESPONDING",
        ),
    ],
)
def test_scontrol_states_of_cloud_nodes(
    flags: list[str], changes: dict[str, Any], state: str
) -> None:
    client = peer(cloud("cloud1", flags, **changes))
    lines = call(client, "scontrol", "show", "node", "cloud1").lines
    assert f"   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A" in lines


def test_scontrol_show_node_of_a_powered_down_node() -> None:
    """The group's size as configured, no address but its name, no heartbeat."""
    assert call(powered_down(), "scontrol", "show", "node", "cloud3").lines == [
        "NodeName=cloud3 CoresPerSocket=1",
        "   CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=N/A",
        "   AvailableFeatures=cloud,c7i",
        "   ActiveFeatures=cloud,c7i",
        "   Gres=gpu:a100:2",
        "   NodeAddr=cloud3 NodeHostName=cloud3",
        "   RealMemory=2000 AllocMem=0 FreeMem=N/A Sockets=4 Boards=1",
        "   State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
        "MCS_label=N/A",
        "   Partitions=debug",
        "   LastHeartbeat=Unknown",
        "   CfgTRES=cpu=4,mem=2000M,gres/gpu=2",
        "   AllocTRES=",
        "",
    ]


def test_scontrol_show_partition_counts_the_cloud_nodes() -> None:
    lines = call(powered_down(), "scontrol", "show", "partition").lines
    assert "   Nodes=cloud[1-4],localhost" in lines
    assert "   State=UP TotalCPUs=20 TotalNodes=5 SelectTypeParameters=NONE" in lines
    assert "   TRES=cpu=20,mem=31593M,node=5" in lines


def owned(name: str, display: str, flags: list[str], **changes: Any) -> NodeInfo:
    """An owned node in a ``[power]`` phase: drained in its record, shown as up."""
    return node(name, cpus=4, state="DRAIN", display_state=display, state_flags=flags, **changes)


def test_owned_nodes_in_power_phases_show_slurms_marks_and_flags() -> None:
    """``[power]`` (docs/admin/power.md): the marks and ``State=`` flags of Slurm's
    power saving on owned nodes, with no CLOUD flag; ``-t`` selects each phase."""
    client = FakeClient(
        node_list=[
            owned("n1", "idle", ["POWERED_DOWN"]),
            owned("n2", "idle", ["POWERING_DOWN"]),
            owned("n3", "idle", ["NOT_RESPONDING", "POWERING_UP"]),
            owned("n4", "mix", ["POWER_DOWN"], cpus_alloc=2),
        ],
        partition_list=[partition("debug", default=True, nodes=["n1", "n2", "n3", "n4"])],
    )
    assert call(client, "sinfo", "-h", "-N", "-o", "%N %t").lines == [
        "n1 idle~",
        "n2 idle%",
        "n3 idle#",
        "n4 mix!",
    ]
    shown = call(client, "scontrol", "-o", "show", "node").out
    for state in (
        "State=IDLE+POWERED_DOWN ",
        "State=IDLE+POWERING_DOWN ",
        "State=IDLE+NOT_RESPONDING+POWERING_UP ",
        "State=MIXED+POWER_DOWN ",
    ):
        assert state in shown
    for name, want in (("power_down", "n4"), ("powered_down", "n1"), ("pow_dn", "n4")):
        assert call(client, "sinfo", "-h", "-N", "-t", name, "-o", "%N").lines == [want]
