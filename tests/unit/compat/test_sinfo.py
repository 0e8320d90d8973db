"""sinfo: partition/state grouping, summaries, node view and format letters."""

from __future__ import annotations

from compat_fakes import FakeClient, call, node, partition


def cluster() -> FakeClient:
    return FakeClient(
        node_list=[
            node("vm"),
            node("n2", display_state="alloc", cpus_alloc=2),
            node("n1", display_state="alloc", cpus_alloc=2),
            node("n3", display_state="mix", cpus_alloc=1),
            node(
                "g1",
                display_state="drain",
                reason="bad fan",
                gpus=4,
                gpu_model="a100",
                features=["a100", "ib"],
            ),
        ],
        partition_list=[
            partition("debug", default=True, nodes=["vm", "n1", "n2", "n3"]),
            partition("gpu", max_time_seconds=3600, nodes=["g1"]),
            partition("empty", up=False, max_time_seconds=86400 * 2, nodes=["none"]),
        ],
    )


def test_reference_layout() -> None:
    """The two-partition example observed with Slurm 22.05."""
    client = FakeClient(
        node_list=[node("vm")],
        partition_list=[partition("debug", default=True), partition("gpu", max_time_seconds=3600)],
    )
    assert call(client, "sinfo").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      1   idle vm",
        "gpu          up    1:00:00      1   idle vm",
    ]


def test_grouped_by_state_with_hostlists() -> None:
    """Partitions in their order, and in each the highest node state first (Slurm's
    default sort "#P,-t": mixed 5, allocated 3, idle 2; docs/slurm-checks.md)."""
    assert call(cluster(), "sinfo").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      1    mix n3",
        "debug*       up   infinite      2  alloc n[1-2]",
        "debug*       up   infinite      1   idle vm",
        "gpu          up    1:00:00      1  drain g1",
        "empty      down 2-00:00:00      0    n/a ",
    ]


def test_summarize() -> None:
    """One space before NODELIST, as Slurm 22.05.8 prints ``-s`` (HAL printed two)."""
    assert call(cluster(), "sinfo", "-s").lines == [
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST",
        "debug*       up   infinite          3/1/0/4 n[1-3],vm",
        "gpu          up    1:00:00          0/0/1/1 g1",
        "empty      down 2-00:00:00          0/0/0/0 ",
    ]


def test_node_long() -> None:
    lines = call(cluster(), "sinfo", "-N", "-l", "-n", "g1,vm").lines
    assert lines[0] == "Sat Nov 21 21:32:00 2026"
    assert lines[1:] == [
        "NODELIST  NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE "
        "REASON              ",
        "g1            1       gpu     drained 2       2:1:1   1000        0      1  a100,ib "
        "bad fan             ",
        "vm            1    debug*        idle 2       2:1:1   1000        0      1   (null) "
        "none                ",
    ]


def test_node_view() -> None:
    assert call(cluster(), "sinfo", "-N", "-h", "-p", "gpu").lines == [
        "g1            1       gpu drain "
    ]


def test_node_view_lists_a_node_once_per_partition_holding_it() -> None:
    """By node, then by partition name, whatever the partitions' order; a partition's
    name of no registered node (``none``) lists nothing."""
    two = cluster()
    two.partition_list.insert(0, partition("all", nodes=["vm", "g1", "n1", "n2", "n3"]))
    lines = call(two, "sinfo", "-N", "-h", "-o", "%N %P").lines
    assert lines == [
        "g1 all",
        "g1 gpu",
        "n1 all",
        "n1 debug*",
        "n2 all",
        "n2 debug*",
        "n3 all",
        "n3 debug*",
        "vm all",
        "vm debug*",
    ]


def test_format_letters() -> None:
    lines = call(
        cluster(), "sinfo", "-h", "-p", "gpu", "-o", "%P|%a|%l|%D|%t|%T|%N|%c|%m|%G|%f|%E|%C"
    ).lines
    assert lines == ["gpu|up|1:00:00|1|drain|drained|g1|2|1000|gpu:a100:4|a100,ib|bad fan|0/0/2/2"]


def test_a_right_aligned_node_list_title_is_not_cut_its_nodes_are() -> None:
    """Slurm 22.05.8: ``sinfo -o '%.3N|%3N|%.3P'`` prints ``NODELIST|NOD|PAR`` over
    ``loc|loc|de*`` (squeue cuts neither; docs/slurm-checks.md)."""
    lines = call(cluster(), "sinfo", "-p", "gpu", "-o", "%.1N|%1N|%.1P").lines
    assert lines == ["NODELIST|N|P", "g|g|g"]


def test_state_filter() -> None:
    # the drained idle g1 is idle too, as Slurm 22.05.8 matches base states
    assert call(cluster(), "sinfo", "-h", "-t", "idle,mixed", "-o", "%N %t").lines == [
        "n3 mix",
        "vm idle",
        "g1 drain",
    ]


def test_an_unknown_letter_prints_as_written_and_is_no_error() -> None:
    """Slurm 22.05.8: ``sinfo -o "%Q|%D"`` prints ``%Q|NODES`` over ``%Q|4``, says
    ``Invalid node format specification: Q`` on stderr and exits 0 (HAL refused, rc 1)."""
    result = call(cluster(), "sinfo", "-o", "%Q|%.3q|%D")
    assert result.rc == 0
    assert result.lines == ["%Q|%.3q|NODES", "%Q|%.3q|5"]
    assert result.err.splitlines() == [
        "Invalid node format specification: Q",
        "Invalid node format specification: q",
    ]


def test_rows_sort_as_slurms_default() -> None:
    """Slurm 22.05.8 (docs/slurm-checks.md, "sinfo's row order"): each partition's rows
    by node state, highest first, with or without a partition column; ``-N`` by node,
    then by partition name (``aaa`` before ``debug*``), not their configured order."""
    client = FakeClient(
        node_list=[
            node("n1", display_state="alloc", cpus_alloc=4),
            node("n2"),
            node("n3", display_state="drain", reason="maint"),
            node("n4", state="DOWN", display_state="down", reason="broken"),
            node("n5"),
        ],
        partition_list=[
            partition("debug", default=True, nodes=["n1", "n2", "n3", "n4", "n5"]),
            partition("other", nodes=["n1", "n4", "n5"]),
            partition("aaa", nodes=["n2"]),
        ],
    )
    assert call(client, "sinfo", "-h", "-o", "%P %t %N").lines == [
        "debug* drain n3",
        "debug* alloc n1",
        "debug* idle n[2,5]",
        "debug* down n4",
        "other alloc n1",
        "other idle n5",
        "other down n4",
        "aaa idle n2",
    ]
    assert call(client, "sinfo", "-h", "-o", "%t %N").lines == [
        "drain n3",
        "alloc n1",
        "idle n[2,5]",
        "down n4",
    ]
    by_node = call(client, "sinfo", "-h", "-N", "-o", "%N %P").lines
    assert by_node == [
        "n1 debug*", "n1 other", "n2 aaa", "n2 debug*", "n3 debug*", "n4 debug*", "n4 other",
        "n5 debug*", "n5 other",
    ]  # fmt: skip
