"""topology plugin on a block topology (Slurm's topology/block): the smallest
(aggregated) block that holds the job, least free capacity first; --topology at the
block levels; a seeded property test against a brute-force oracle."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from hal.core.states import PendingReason as R
from hal.core.topology import BLOCK_ROOT, Block, Topology, block_paths, effective_block_sizes
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import JobBuilder, cluster, make_job, make_node, placed_nodes, reasons

NOW = 1_000_000.0
J = make_job


def _topo(n_blocks: int, per_block: int, sizes: tuple[int, ...] = ()) -> Topology:
    blocks = tuple(
        Block(f"b{i}", tuple(f"b{i}-{k}" for k in range(per_block))) for i in range(n_blocks)
    )
    return Topology(blocks=blocks, block_sizes=sizes)


def _run(
    topo: Topology, job: JobBuilder, busy: Sequence[str] = ()
) -> tuple[tuple[str, ...] | None, R | None]:
    nodes = [make_node(name).topology(*topo.path_of(name)) for b in topo.blocks for name in b.nodes]
    snap = cluster(NOW).nodes(*nodes).pending(job)
    if busy:
        snap = snap.running(
            J(900).tasks(8 * len(busy), per_node=8).nodes(len(busy)).running_on(*busy)
        )
    plan = build_scheduler(default_profile(topology=topo)).schedule(snap.build())
    jid = job.build().id
    return placed_nodes(plan).get(jid), reasons(plan).get(jid)


def _blocks(nodes: Sequence[str]) -> set[str]:
    return {n.split("-")[0] for n in nodes}


def test_block_paths_aggregate_consecutive_base_blocks() -> None:
    topo = _topo(4, 2, (2, 4, 8))
    assert topo.block_mode
    assert topo.path_of("b0-1") == (BLOCK_ROOT, "b0..b3", "b0..b1", "b0")
    assert topo.path_of("b3-0") == (BLOCK_ROOT, "b0..b3", "b2..b3", "b3")
    assert topo.level_name(0) == "block"
    # Slurm's default BlockSizes: the base size and its power-of-two multiples
    assert effective_block_sizes(topo.blocks, ()) == (2, 4, 8)
    # a short trailing group keeps its own (smaller) aggregation
    paths = block_paths(_topo(3, 1).blocks, (1, 2))
    assert paths["b2-0"] == (BLOCK_ROOT, "b2", "b2")


def test_switches_take_precedence_over_blocks() -> None:
    from hal.core.topology import Switch

    topo = Topology(switches=(Switch("s0", nodes=("n1",)),), blocks=(Block("b0", ("n1",)),))
    assert not topo.block_mode and topo.path_of("n1") == ("s0",)


def test_job_goes_to_the_base_block_with_least_free_capacity() -> None:
    """b0 has 4 free, b1 has 2 free (after 2 busy): a 2-node job takes b1."""
    placed, _ = _run(_topo(4, 4, (4, 8, 16)), J(1).nodes(2), busy=("b1-0", "b1-1"))
    assert placed is not None and _blocks(placed) == {"b1"}


def test_smallest_aggregated_block_that_fits_then_least_free() -> None:
    """6 nodes fit no base block of 4; both 8-node aggregations (b0..b1, b2..b3) can
    hold it, b2..b3 has fewer free nodes (7 against 8): the job goes there, on 2 base
    blocks, leaving b0..b1 whole."""
    placed, _ = _run(_topo(4, 4, (4, 8, 16)), J(1).nodes(6), busy=("b3-0",))
    assert placed is not None and _blocks(placed) == {"b2", "b3"}


def test_larger_than_the_largest_block_spans_blocks() -> None:
    placed, _ = _run(_topo(4, 2, (2, 4)), J(1).nodes(6))
    assert placed is not None and len(placed) == 6


@pytest.mark.parametrize(
    ("situation", "job", "busy", "expected"),
    [
        ("required block fits", J(1).nodes(3).topology("block", required=True), (), 1),
        (
            "required block, none free enough now: Resources",
            J(1).nodes(4).topology("block", required=True),
            ("b0-0", "b1-0", "b2-0", "b3-0"),
            R.RESOURCES,
        ),
        (
            "required block larger than any block: BadConstraints",
            J(1).nodes(5).topology("block", required=True),
            (),
            R.BAD_CONSTRAINTS,
        ),
        (
            "required level1 (8-node aggregation)",
            J(1).nodes(7).topology("level1", required=True),
            ("b0-0",),
            2,
        ),
        (
            "preferred block falls back to spanning",
            J(1).nodes(4).topology("block"),
            ("b0-0", "b1-0", "b2-0", "b3-0"),
            2,
        ),
        ("unknown level", J(1).nodes(2).topology("rack"), (), R.BAD_CONSTRAINTS),
    ],
)
def test_block_topology_constraints(
    situation: str, job: JobBuilder, busy: tuple[str, ...], expected: int | R
) -> None:
    placed, reason = _run(_topo(4, 4, (4, 8, 16)), job, busy)
    if isinstance(expected, R):
        assert placed is None and reason is expected, situation
    else:
        assert placed is not None and len(_blocks(placed)) == expected, situation


# -- property test: the plugin against a brute-force oracle ----------------------------


def _oracle(topo: Topology, free: set[str], count: int) -> list[tuple[frozenset[str], int]]:
    """By enumeration: the blocks of the smallest level that can hold ``count`` free
    nodes, with the least free capacity among that level's blocks that can, each with
    the fewest of its base blocks whose free nodes cover ``count``."""
    sizes = effective_block_sizes(topo.blocks, topo.block_sizes)
    base = [frozenset(b.nodes) for b in topo.blocks]
    levels = [[(i, i + 1) for i in range(len(base))]]
    for size in sizes[1:]:
        g = size // sizes[0]
        levels.append([(i, min(i + g, len(base))) for i in range(0, len(base), g)])
    levels.append([(0, len(base))])  # everything (a job larger than every block)
    for spans in levels:
        fits = [(len(free & frozenset().union(*base[a:b])), a, b) for a, b in spans]
        fits = [f for f in fits if f[0] >= count]
        if not fits:
            continue
        least = min(f[0] for f in fits)
        out = []
        for n, a, b in fits:
            if n != least:
                continue
            fewest = min(
                m
                for m in range(1, b - a + 1)
                if any(
                    sum(len(free & base[i]) for i in combo) >= count
                    for combo in itertools.combinations(range(a, b), m)
                )
            )
            out.append((frozenset().union(*base[a:b]), fewest))
        return out
    return []


@pytest.mark.parametrize("seed", range(200))
def test_block_placement_matches_the_oracle(seed: int) -> None:
    rng = random.Random(seed)
    n_blocks = rng.choice((2, 3, 4, 6, 8))
    per_block = rng.choice((1, 2, 3, 4))
    sizes = tuple(per_block * 2**k for k in range(rng.randint(1, 3)))
    topo = _topo(n_blocks, per_block, sizes)
    names = [n for b in topo.blocks for n in b.nodes]
    busy = [n for n in names if rng.random() < 0.4]
    free = set(names) - set(busy)
    if len(free) < 2:
        return
    count = rng.randint(2, len(free))
    placed, _ = _run(topo, J(1).nodes(count), busy)
    candidates = _oracle(topo, free, count)
    assert candidates and placed is not None
    assert len(placed) == count and set(placed) <= free
    # inside one of the smallest blocks that can hold it, with the least free capacity,
    # on the fewest of its base blocks
    inside = [fewest for block, fewest in candidates if set(placed) <= block]
    assert inside, (placed, candidates)
    assert len(_blocks(placed)) == min(inside)


def test_topology_show_draws_blocks_and_block_sizes() -> None:
    from hal.cli.topology import draw
    from hal.wire.nodes import BlockInfo, TopologyInfo

    info = TopologyInfo(
        configured=True,
        level_names=["block", "level1", "level2"],
        blocks=[
            BlockInfo(name="b0", nodes=["n1", "n2"], nodes_free=1),
            BlockInfo(name="b1", nodes=["n3", "n4"], nodes_free=2),
        ],
        block_sizes=[2, 4],
    )
    text = draw(info)
    assert "block b0: free 1/2  n[1-2]" in text
    assert "block sizes: 2,4" in text
    assert "levels (leaf first): block, level1, level2" in text


def test_blocks_from_the_config_table_give_block_paths() -> None:
    from hal.config.topology import topology_from_table

    topo = topology_from_table(
        {
            "block_sizes": [2, 4],
            "blocks": [{"name": "b0", "nodes": "g[0-1]"}, {"name": "b1", "nodes": "g[2-3]"}],
        }
    )
    assert topo.path_of("g3") == (BLOCK_ROOT, "b0..b1", "b1")
    assert set(topo.paths()) == {"g0", "g1", "g2", "g3"}
