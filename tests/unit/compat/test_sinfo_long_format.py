"""sinfo ``-O/--Format`` field names and the letters ``%e`` (free memory), ``%O`` (CPU
load), ``%C``, ``%A``, ``%n``: what the agents measure prints as ``N/A`` while unknown and
as a ``min-max`` range over a group of nodes, as Slurm's sinfo."""

from __future__ import annotations

from compat_fakes import FakeClient, MiB, call, node, partition


def cluster() -> FakeClient:
    return FakeClient(
        node_list=[
            node("n1", free_memory_bytes=700 * MiB, cpu_load=0.05),
            node("n2", free_memory_bytes=900 * MiB, cpu_load=1.5),
            node("n3"),  # no agent has said yet
            node(
                "g1",
                display_state="mix",
                cpus_alloc=1,
                memory_alloc_bytes=200 * MiB,
                gpus=4,
                gpus_alloc=2,
                gpu_ids_alloc=[0, 1],
                gpu_model="NVIDIA A100-SXM4-80GB",
                free_memory_bytes=512 * MiB,
                cpu_load=2.0,
                state_flags=["NOT_RESPONDING"],
                address="10.0.0.9",
            ),
        ],
        partition_list=[
            partition("debug", default=True, nodes=["n1", "n2"]),
            partition("gpu", max_time_seconds=3600, default_time_seconds=600, nodes=["g1"]),
            partition("spare", nodes=["n3"]),
        ],
    )


def test_long_names_with_widths_and_suffixes() -> None:
    lines = call(
        cluster(),
        "sinfo",
        "-O",
        "Partition:10,Available:.6,TimeLimit:10,Nodes:.6,StateCompact:8,NodeList",
    ).lines
    assert lines == [
        "PARTITION  AVAILTIMELIMIT  NODESSTATE   NODELIST            ",
        "debug*        upinfinite       2idle    n[1-2]              ",
        "gpu           up1:00:00        1mix*    g1                  ",
        "spare         upinfinite       1idle    n3                  ",
    ]


def test_every_field_in_node_view_parsable() -> None:
    fields = (
        "NodeList:0|,NodeHost:0|,NodeAddr:0|,PartitionName:0|,StateLong:0|,CPUs:0|,"
        "CPUsState:0|,CPUsLoad:0|,Memory:0|,AllocMem:0|,FreeMem:0|,Gres:0|,GresUsed:0|,"
        "Features:0|,Reason:0|,NodeAIOT:0|,NodeAI:0|,DefaultTime:0|,PriorityTier:0|,Time"
    )
    lines = call(cluster(), "sinfo", "-N", "--Format", fields).lines
    assert lines[0] == (
        "NODELIST|HOSTNAMES|NODE_ADDR|PARTITION|STATE|CPUS|CPUS(A/I/O/T)|CPU_LOAD|MEMORY|"
        "ALLOCMEM|FREE_MEM|GRES|GRES_USED|AVAIL_FEATURES|REASON|NODES(A/I/O/T)|NODES(A/I)|"
        "DEFAULTTIME|PRIO_TIER|TIMELIMIT           "
    )
    assert lines[1:] == [
        "g1|g1|10.0.0.9|gpu|mixed*|2|1/1/0/2|2.00|1000|200|512|gpu:nvidia_a100-sxm4-80gb:4|"
        "gpu:nvidia_a100-sxm4-80gb:2(IDX:0-1)|(null)|none|1/0/0/1|1/0|10:00|1|1:00:00             ",
        "n1|n1|n1|debug|idle|2|0/2/0/2|0.05|1000|0|700|(null)|(null)|(null)|none|0/1/0/1|0/1|"
        "n/a|1|infinite            ",
        "n2|n2|n2|debug|idle|2|0/2/0/2|1.50|1000|0|900|(null)|(null)|(null)|none|0/1/0/1|0/1|"
        "n/a|1|infinite            ",
        "n3|n3|n3|spare|idle|2|0/2/0/2|N/A|1000|0|N/A|(null)|(null)|(null)|none|0/1/0/1|0/1|"
        "n/a|1|infinite            ",
    ]


def test_free_memory_and_load_are_ranges_over_a_group_unless_exact() -> None:
    assert call(cluster(), "sinfo", "-h", "-p", "debug", "-o", "%P %D %e %O %C %N").lines == [
        "debug* 2 700-900 0.05-1.50 0/4/0/4 n[1-2]"
    ]
    assert call(cluster(), "sinfo", "-h", "-e", "-p", "debug", "-o", "%D %e %O %N").lines == [
        "1 700 0.05 n1",
        "1 900 1.50 n2",
    ]
    assert call(cluster(), "sinfo", "-h", "-p", "spare", "-o", "%e %O").lines == ["N/A N/A"]


def test_the_last_format_given_wins_read_as_a_long_list_after_one() -> None:
    """Slurm 22.05.8 reads an ``-o`` after a ``-O`` as a ``-O`` list (see
    test_long_format_mixes.py); HAL printed ``n3``."""
    client = cluster()
    assert call(client, "sinfo", "-h", "-p", "spare", "-o", "%N", "-O", "StateLong:6").lines == [
        "idle  "
    ]
    after = call(client, "sinfo", "-h", "-p", "spare", "-O", "StateLong", "-o", "%N")
    assert (after.lines, after.err) == (
        [""],
        "sinfo: error: Invalid job format specification: %N\n",
    )


def test_unknown_long_names_are_dropped_with_slurms_warning() -> None:
    """Slurm 22.05.8: ``sinfo: error: Invalid job format specification: NAME`` (as
    written, and "job") on stderr for each, rc 0; the field is dropped, its width too,
    and only its suffix is printed (HAL refused, rc 1)."""
    bad = call(cluster(), "sinfo", "-p", "spare", "-O", "Partition:.4|,Bogus:.3xyz,nodes:3")
    assert bad.rc == 0
    assert bad.err == "sinfo: error: Invalid job format specification: Bogus\n"
    assert bad.lines == ["PART|xyzNOD", "spar|xyz1  "]
    dropped = call(cluster(), "sinfo", "-N", "-n", "n3", "-O", "NodeList:10,xx:2^,foo")
    assert dropped.rc == 0
    assert dropped.err.splitlines() == [
        "sinfo: error: Invalid job format specification: xx",
        "sinfo: error: Invalid job format specification: foo",
    ]
    assert dropped.lines == ["NODELIST  ^", "n3        ^"]
    # nothing known: an empty line for the title and for the row
    none = call(cluster(), "sinfo", "-p", "spare", "-O", "bogus")
    assert none.rc == 0 and none.out == "\n\n"


def test_an_empty_long_format_prints_empty_lines() -> None:
    """Slurm 22.05.8: ``sinfo -O ''`` prints an empty line for the title and
    for each row, rc 0, with no warning; ``-O ' '`` the same after ``sinfo: error:
    Invalid job format specification:  `` (a blank name). HAL refused an empty ``-O``;
    an empty ``-o`` it still refuses (test_compat_bad_input.py)."""
    empty = call(cluster(), "sinfo", "-p", "spare", "-O", "")
    assert (empty.rc, empty.out, empty.err) == (0, "\n\n", "")
    assert call(cluster(), "sinfo", "-h", "-p", "spare", "--Format=").out == "\n"
    blank = call(cluster(), "sinfo", "-p", "spare", "-O", " ")
    assert (blank.rc, blank.out) == (0, "\n\n")
    assert blank.err == "sinfo: error: Invalid job format specification:  \n"


def test_scontrol_show_node_has_load_and_free_memory() -> None:
    out = call(cluster(), "scontrol", "show", "node", "n1").out
    assert "CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.05" in out
    assert "RealMemory=1000 AllocMem=0 FreeMem=700" in out
    out = call(cluster(), "scontrol", "show", "node", "n3").out
    assert "CPULoad=N/A" in out and "FreeMem=N/A" in out
