"""`hal up`'s local agents split the host: on a 2-CPU, 24 GB machine its two agents each
offered 2 CPUs and 24 GB (the cluster showed 4 CPUs and 47 GiB) and a ``-c1`` job saw
both CPUs. Now each offers its own CPUs and its share of the memory, and more agents than
CPUs is refused with what to write."""

from __future__ import annotations

import os

import pytest

from hal.cli.host_share import AgentShare, parse_cpu_list, size_text, split_host
from hal.core.errors import InvalidRequest
from hal.core.resources import GiB, MiB


@pytest.mark.parametrize(
    ("agents", "cpus", "expected"),
    [
        (2, [0, 1], [(0,), (1,)]),
        (2, [0, 1, 2], [(0, 1), (2,)]),  # the first agents take the odd one
        (3, [4, 5, 6, 7, 8, 9, 10], [(4, 5, 6), (7, 8), (9, 10)]),
        (1, [3, 1, 2], [(1, 2, 3)]),  # a taskset's CPUs, in any order
        (0, [0, 1], []),
    ],
)
def test_the_host_cpus_are_split_as_evenly_as_they_divide(
    agents: int, cpus: list[int], expected: list[tuple[int, ...]]
) -> None:
    shares = split_host(agents, cpus, 24 * GiB)
    assert [s.cpu_ids for s in shares] == expected
    assert [s.cpus for s in shares] == [len(ids) for ids in expected]
    assert [s.name for s in shares] == [f"node{i + 1}" for i in range(agents)]
    assert sorted(c for s in shares for c in s.cpu_ids) == (sorted(cpus) if agents else [])


def test_the_memory_is_split_evenly_in_whole_mib_and_never_adds_up_to_more() -> None:
    memory = 24 * GiB + 12345  # a host's total is rarely round
    shares = split_host(3, [0, 1, 2], memory)
    assert {s.memory_bytes for s in shares} == {(memory // 3) // MiB * MiB}
    assert sum(s.memory_bytes for s in shares) <= memory


def test_more_agents_than_cpus_is_refused_saying_what_to_write() -> None:
    with pytest.raises(InvalidRequest) as err:
        split_host(3, [0, 1], 8 * GiB)
    assert "--agents 3: this host has 2 CPU(s)" in err.value.message
    assert "write --agents 2 or fewer" in err.value.message
    assert err.value.field == "agents"


def test_cpus_per_agent_keeps_virtual_nodes_that_share_the_host() -> None:
    """`--cpus-per-agent 32` (benchmarks on a small host): each offers 32 CPUs, binds none."""
    shares = split_host(3, [0, 1], 8 * GiB, cpus_per_agent=32)
    assert [(s.cpus, s.cpu_ids) for s in shares] == [(32, ())] * 3
    assert shares[0].agent_args() == ["--cpus", "32", "--memory", f"{8 * GiB // 3 // MiB}M"]
    assert shares[0].describe() == "node1: 32 CPUs (shared with the other agents), 2.7 GiB"


def test_a_bound_agent_is_started_on_its_cpu_list_and_says_so() -> None:
    share = AgentShare("node2", (2, 3, 4, 7), 4, 6 * GiB)
    assert share.agent_args() == ["--cpu-list", "2-4,7", "--memory", "6144M"]
    assert share.describe() == "node2: 4 CPUs (host CPU 2-4,7), 6.0 GiB"
    assert AgentShare("node1", (0,), 1, GiB).describe() == "node1: 1 CPU (host CPU 0), 1.0 GiB"


def test_a_cpu_list_is_read_in_ranges_and_must_be_cpus_this_process_may_use() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    first = allowed[0]
    assert parse_cpu_list(f"{first}") == (first,)
    assert parse_cpu_list(",".join(map(str, allowed))) == tuple(allowed)
    with pytest.raises(InvalidRequest, match=r"write CPU numbers and ranges, e\.g\. 0-3,8"):
        parse_cpu_list("0-")
    with pytest.raises(InvalidRequest, match="write CPU numbers and ranges"):
        parse_cpu_list("3-1")
    beyond = max(allowed) + 1
    with pytest.raises(InvalidRequest, match=f"CPU {beyond} is not one this process may run on"):
        parse_cpu_list(f"{first},{beyond}")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (12052 * MiB, "11.8 GiB"),
        (3 * GiB * 1024**2, "3072.0 TiB"),
    ],
)
def test_sizes_read_in_binary_units(size: int, text: str) -> None:
    assert size_text(size) == text
