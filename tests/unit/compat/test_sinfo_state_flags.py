"""sinfo's state suffixes: a node whose agent stopped heartbeating shows ``idle*``, one in
a maintenance reservation ``maint`` or ``alloc$``, and ``-t`` still matches the base state."""

from __future__ import annotations

from compat_fakes import FakeClient, call, node, partition

NR = "NOT_RESPONDING"


def cluster() -> FakeClient:
    return FakeClient(
        node_list=[
            node("n1"),
            node("n2", state_flags=[NR]),
            node("n3", display_state="alloc", cpus_alloc=2, state_flags=[NR]),
            node(
                "n4", state="DOWN", display_state="down", reason="Not responding", state_flags=[NR]
            ),
            node("n5", display_state="drain", reason="fan", state_flags=[NR]),
            node("m1", state_flags=["MAINTENANCE"]),
            node("m2", display_state="mix", cpus_alloc=1, state_flags=["MAINTENANCE", NR]),
            node("m3", state_flags=["MAINTENANCE", NR]),
            node("r1", state_flags=["RESERVED"]),
            node("r2", display_state="alloc", cpus_alloc=2, state_flags=["RESERVED"]),
            node("r3", state_flags=["RESERVED", NR]),
        ],
        partition_list=[
            partition(
                "debug",
                default=True,
                nodes=["n1", "n2", "n3", "n4", "n5", "m1", "m2", "m3", "r1", "r2", "r3"],
            )
        ],
    )


def test_short_and_long_states_carry_the_suffix() -> None:
    assert call(cluster(), "sinfo", "-N", "-h", "-o", "%N %t %T").lines == [
        "m1 maint maint",
        "m2 mix$ mixed$",
        "m3 maint* maint*",
        "n1 idle idle",
        "n2 idle* idle*",
        "n3 alloc* allocated*",
        "n4 down* down*",
        "n5 drain* drained*",
        "r1 resv reserved",
        "r2 alloc allocated",
        "r3 idle* idle*",
    ]


def test_the_default_view_groups_responding_and_silent_nodes_apart() -> None:
    client = FakeClient(
        node_list=[node("n1"), node("n2", state_flags=[NR]), node("n3"), node("n4")],
        partition_list=[partition("debug", default=True, nodes=["n1", "n2", "n3", "n4"])],
    )
    assert call(client, "sinfo").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      1  idle* n2",  # NOT_RESPONDING's flag sorts first
        "debug*       up   infinite      3   idle n[1,3-4]",
    ]
    # a silent node is still idle for the summary's A/I/O/T, as in Slurm
    assert call(client, "sinfo", "-s", "-h").lines == [
        "debug*       up   infinite          0/4/0/4 n[1-4]"
    ]


def test_state_filters_match_the_base_state_and_the_flags() -> None:
    def names(states: str) -> list[str]:
        return call(cluster(), "sinfo", "-N", "-h", "-t", states, "-o", "%N").lines

    # n5 is drained and idle: Slurm 22.05.8 matches its base state
    assert names("idle") == ["m1", "m3", "n1", "n2", "n5", "r1", "r3"]
    assert names("no_respond") == ["m2", "m3", "n2", "n3", "n4", "n5", "r3"]
    assert names("idle&no_respond") == ["m3", "n2", "n5", "r3"]
    assert names("DOWN") == ["n4"]
    assert names("maint") == names("MAINTENANCE") == ["m1", "m2", "m3"]
    assert names("resv,reserved") == ["r1", "r2", "r3"]
    assert names("powered_down") == []


def test_scontrol_show_node_appends_the_flags() -> None:
    out = call(cluster(), "scontrol", "show", "node", "n4").out
    assert "State=DOWN+NOT_RESPONDING" in out
    out = call(cluster(), "scontrol", "show", "node", "m2").out
    assert "State=MIXED+MAINTENANCE+NOT_RESPONDING" in out
