"""sinfo -R (--list-reasons): why nodes are down, drained or failing, who said so and
when, as Slurm 22.05.8 printed it (docs/slurm-checks.md "sinfo -R")."""

from __future__ import annotations

from compat_fakes import FakeClient, call, node, partition

T1 = 1795673401.0  # 2026-11-26T06:10:01 UTC (tests run with TZ=UTC)
T2 = T1 + 1


def cluster() -> FakeClient:
    """The nodes of the Slurm check: vm drained while running a job (drng), n1 and n2
    drained in one command, n3 set down a second later, n4 idle; n1 and n2 are in two
    partitions."""
    maint = {"reason": "maint window", "reason_user": "root", "reason_time": T1}
    return FakeClient(
        node_list=[
            node("vm", state="DRAIN", display_state="drng", cpus_alloc=1, **maint),
            node("n1", state="DRAIN", display_state="drain", **maint),
            node("n2", state="DRAIN", display_state="drain", **maint),
            node(
                "n3",
                state="DOWN",
                display_state="down",
                reason="bad disk: sector errors in /dev/sda",
                reason_user="root",
                reason_time=T2,
            ),
            node("n4"),
        ],
        partition_list=[
            partition("debug", default=True),
            partition("other", nodes=["n1", "n2"]),
        ],
    )


def test_default_format_groups_by_reason_user_and_time() -> None:
    assert call(cluster(), "sinfo", "-R").lines == [
        "REASON               USER      TIMESTAMP           NODELIST",
        "maint window         root      2026-11-26T06:10:01 n[1-2],vm",
        "bad disk: sector err root      2026-11-26T06:10:02 n3",
    ]


def test_long_format_adds_the_state_and_uid() -> None:
    lines = call(cluster(), "sinfo", "-R", "-l").lines
    assert lines[0] == "Sat Nov 21 21:32:00 2026"
    # Slurm's default sort: the node state, highest first (draining, drained, down)
    assert lines[1:] == [
        "REASON               USER         TIMESTAMP           STATE  NODELIST",
        "maint window         root(0)      2026-11-26T06:10:01 drng   vm",
        "maint window         root(0)      2026-11-26T06:10:01 drain  n[1-2]",
        "bad disk: sector err root(0)      2026-11-26T06:10:02 down   n3",
    ]


def test_noheader_and_the_long_name() -> None:
    assert call(cluster(), "sinfo", "--list-reasons", "-h").lines == [
        "maint window         root      2026-11-26T06:10:01 n[1-2],vm",
        "bad disk: sector err root      2026-11-26T06:10:02 n3",
    ]
    assert call(cluster(), "sinfo", "-R", "-l", "-h").lines[0].startswith("maint window ")


def test_format_without_widths_prints_whole_values() -> None:
    assert call(cluster(), "sinfo", "-R", "-o", "%E|%u|%H|%N").lines == [
        "REASON|USER|TIMESTAMP|NODELIST",
        "maint window|root|2026-11-26T06:10:01|n[1-2],vm",
        "bad disk: sector errors in /dev/sda|root|2026-11-26T06:10:02|n3",
    ]
    assert call(cluster(), "sinfo", "-R", "-o", "%.25E|%.5u|%N").lines == [
        "                   REASON| USER|NODELIST",
        "             maint window| root|n[1-2],vm",
        "bad disk: sector errors i| root|n3",
    ]


def test_each_node_once_even_in_two_partitions() -> None:
    lines = call(cluster(), "sinfo", "-R", "-h", "-o", "%E|%U|%t|%N|%P").lines
    assert lines == [
        "maint window|root(0)|drng|vm|debug*",
        "maint window|root(0)|drain|n[1-2]|debug*",
        "bad disk: sector errors in /dev/sda|root(0)|down|n3|debug*",
    ]


def test_node_view_keeps_the_state_filter() -> None:
    assert call(cluster(), "sinfo", "-R", "-N").lines == [
        "NODELIST  NODES PARTITION STATE ",
        "n1            1    debug* drain ",
        "n1            1     other drain ",
        "n2            1    debug* drain ",
        "n2            1     other drain ",
        "n3            1    debug* down  ",
        "vm            1    debug* drng  ",
    ]


def test_partition_and_node_filters() -> None:
    assert call(cluster(), "sinfo", "-R", "-h", "-p", "other").lines == [
        "maint window         root      2026-11-26T06:10:01 n[1-2]",
    ]
    assert call(cluster(), "sinfo", "-R", "-h", "-n", "n3,vm").lines == [
        "maint window         root      2026-11-26T06:10:01 vm",
        "bad disk: sector err root      2026-11-26T06:10:02 n3",
    ]
    assert call(cluster(), "sinfo", "-R", "-h", "-t", "drain", "-o", "%N").lines == ["n[1-2],vm"]


def test_long_names() -> None:
    assert call(
        cluster(), "sinfo", "-R", "-O", "Reason,User,UserLong,Timestamp,NodeList"
    ).lines == [
        "REASON              USER                USER                TIMESTAMP           "
        "NODELIST            ",
        "maint window        root                root(0)             2026-11-26T06:10:01 "
        "n[1-2],vm           ",
        "bad disk: sector errroot                root(0)             2026-11-26T06:10:02 "
        "n3                  ",
    ]


def test_reason_unknown_who_and_when() -> None:
    """A reason stored before HAL recorded who set it and when."""
    client = FakeClient(
        node_list=[node("old", state="DRAIN", display_state="drain", reason="fan")],
        partition_list=[partition("debug", default=True)],
    )
    assert call(client, "sinfo", "-R", "-h", "-o", "%E|%u|%U|%H|%N").lines == [
        "fan|Unknown|Unknown|Unknown|old"
    ]


def test_nodes_without_a_reason_in_a_format() -> None:
    """``%u``/``%H`` print for any node; without %P the rows span partitions."""
    lines = call(cluster(), "sinfo", "-h", "-o", "%N %E|%H").lines
    assert sorted(lines) == [
        "n3 bad disk: sector errors in /dev/sda|2026-11-26T06:10:02",
        "n4 none|Unknown",
        "n[1-2],vm maint window|2026-11-26T06:10:01",
    ]
