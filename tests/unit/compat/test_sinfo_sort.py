"""sinfo -S (Slurm's sort list), the rows of partitions a filter left without nodes, and
``%5P`` of the default partition, as Slurm 22.05.8 printed them (docs/slurm-checks.md
"sinfo -S"): its cluster had ``localhost`` idle, ``n1`` down, ``n2`` drained and ``n3``
unknown (mixed here), in partitions debug (default, all four), zeta (n1), gpu (n2, n3) and aaa
(localhost, down)."""

from __future__ import annotations

from compat_fakes import FakeClient, call, node, partition

H = ["-h", "-o", "%P %l %t %N"]


def cluster() -> FakeClient:
    return FakeClient(
        node_list=[
            node("localhost"),
            node("n1", state="DOWN", display_state="down", reason="broke", cpus=1),
            node("n2", state="DRAIN", display_state="drain", reason="maint", cpus=1),
            node("n3", display_state="mix", cpus=2, cpus_alloc=1),
        ],
        partition_list=[
            partition("debug", default=True, nodes=["localhost", "n1", "n2", "n3"]),
            partition("zeta", max_time_seconds=3600, nodes=["n1"]),
            partition("gpu", max_time_seconds=7200, nodes=["n2", "n3"]),
            partition("aaa", up=False, max_time_seconds=1800, nodes=["localhost"]),
        ],
    )


def test_descending_partition_names() -> None:
    """``-S -P``: partitions by name, descending; rows of a partition keep their order."""
    assert call(cluster(), "sinfo", "-S", "-P", *H).lines == [
        "zeta 1:00:00 down n1",
        "gpu 2:00:00 drain n2",
        "gpu 2:00:00 mix n3",
        "debug* infinite idle localhost",
        "debug* infinite down n1",
        "debug* infinite drain n2",
        "debug* infinite mix n3",
        "aaa 30:00 idle localhost",
    ]


def test_node_names_ascending_and_descending() -> None:
    """``-S +N`` by the first node of each row (``localhost`` before ``n1``)."""
    by_node = [line.split()[-1] for line in call(cluster(), "sinfo", "-S", "+N", *H).lines]
    assert by_node == ["localhost", "localhost", "n1", "n1", "n2", "n2", "n3", "n3"]
    by_node = [line.split()[-1] for line in call(cluster(), "sinfo", "-S", "-N", *H).lines]
    assert by_node == ["n3", "n3", "n2", "n2", "n1", "n1", "localhost", "localhost"]


def test_configured_order_then_state_is_the_default() -> None:
    lines = call(cluster(), "sinfo", *H).lines
    assert call(cluster(), "sinfo", "-S", "#P,-t", *H).lines == lines
    assert lines[:5] == [
        "debug* infinite drain n2",
        "debug* infinite mix n3",
        "debug* infinite idle localhost",
        "debug* infinite down n1",
        "zeta 1:00:00 down n1",
    ]


def test_a_minus_or_hash_counts_only_right_before_its_letter() -> None:
    """Slurm: ``-#P`` is ``#P`` (configured order), ``#-P`` is names descending."""

    def parts(spec: str) -> list[str]:
        return call(cluster(), "sinfo", "-S", spec, "-h", "-o", "%P").lines

    assert parts("-#P") == ["debug*", "zeta", "gpu", "aaa"]
    assert parts("#-P") == ["zeta", "gpu", "debug*", "aaa"]
    assert parts("P") == ["aaa", "debug*", "gpu", "zeta"]


def test_time_limits_sort_infinite_last_and_unknown_letters_are_skipped() -> None:
    limits = [line.split()[1] for line in call(cluster(), "sinfo", "-S", "l,Q", *H).lines]
    assert limits == ["30:00", "1:00:00", "2:00:00", "2:00:00"] + ["infinite"] * 4
    assert call(cluster(), "sinfo", "-S", "Q", *H).rc == 0


def test_node_view_sorts_by_the_list_given() -> None:
    """``-N -S P``: by partition name, each partition's nodes in node order."""
    lines = call(cluster(), "sinfo", "-N", "-S", "P", "-h", "-o", "%N %P").lines
    assert lines == [
        "localhost aaa",
        "localhost debug*",
        "n1 debug*",
        "n2 debug*",
        "n3 debug*",
        "n2 gpu",
        "n3 gpu",
        "n1 zeta",
    ]


def test_a_filter_leaves_every_partition_a_row() -> None:
    """``sinfo -t comp`` (no node completing): each partition with 0 nodes, ``n/a`` state
    and an empty list, as Slurm 22.05.8 printed ``-t alloc`` with no node allocated."""
    assert call(cluster(), "sinfo", "-t", "comp").lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      0    n/a ",
        "zeta         up    1:00:00      0    n/a ",
        "gpu          up    2:00:00      0    n/a ",
        "aaa        down      30:00      0    n/a ",
    ]
    assert call(cluster(), "sinfo", "-n", "n1", "-h", "-o", "%P %D").lines == [
        "debug* 1",
        "zeta 1",
        "gpu 0",
        "aaa 0",
    ]
    assert call(cluster(), "sinfo", "-t", "comp", "-S", "-P", "-h", "-o", "%R").lines == [
        "zeta",
        "gpu",
        "debug",
        "aaa",
    ]


def test_without_a_partition_column_a_filter_leaves_no_rows() -> None:
    """Slurm prints the empty rows only with ``%P`` or ``%R``: ``sinfo -t alloc -o
    "%a %D"`` with no node allocated (here ``-t comp``) is its header alone, and ``-h -t
    down -o %D`` the one down node."""
    assert call(cluster(), "sinfo", "-t", "comp", "-o", "%a %D").lines == ["AVAIL NODES"]
    assert call(cluster(), "sinfo", "-t", "down", "-h", "-o", "%D").lines == ["1"]


def test_the_node_columns_of_an_empty_row() -> None:
    """What Slurm 22.05.8 printed for ``sinfo -t alloc -o %all``'s node columns with no
    node allocated (here ``-t comp``)."""
    fmt = "%P|%D|%N|%t|%T|%c|%m|%d|%w|%e|%O|%z|%X|%Y|%Z|%f|%b|%G|%E|%u|%U|%H|%A|%F|%C"
    lines = call(cluster(), "sinfo", "-t", "comp", "-p", "gpu", "-h", "-o", fmt).lines
    assert lines == [
        "gpu|0||n/a|n/a|0|0|0|0|0|0.00|0:0:0|0|0|0|(null)|(null)|(null)|none|root|root(0)"
        "|Unknown|0/0|0/0/0/0|0/0/0/0"
    ]


def test_a_cut_default_partition_keeps_its_mark() -> None:
    """``%5P``: ``debu*`` (HAL printed ``debug``); the title is cut as before."""
    lines = call(cluster(), "sinfo", "-o", "%5P|%.5P|%3P|%.3P|%6P|%P", "-p", "debug,zeta").lines
    assert lines[:3] == [
        "PARTI|PARTI|PAR|PAR|PARTIT|PARTITION",
        "debu*|debu*|de*|de*|debug*|debug*",
        "zeta | zeta|zet|zet|zeta  |zeta",
    ]
