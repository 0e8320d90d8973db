"""Choosing a multi-node job's nodes on the switch tree (``choose``) or on blocks
(``choose_block``, Slurm's topology/block): vectorised over leaves.

``choose(index, ranked, count, top)`` takes the feasible rows in node-score order and
returns ``count`` of them:

1. **One leaf** when any leaf has ``count`` free nodes: the one with the fewest free
   nodes that still fits (best fit, so big free leaves stay whole for big jobs).
2. Otherwise **as few leaves as possible**, under the **lowest switch** that achieves
   that number: for each level ``k <= top`` and each of its domains, the fewest leaves
   that cover ``count`` (largest leaves first, which is exact for "fewest leaves whose
   free nodes add up to count"); the least such number over the ``top`` level's domains
   is the target, and the lowest level with a domain reaching it wins (ties: the fullest
   domain, then the lowest id).
3. Inside that domain: every free node of the largest ``m - 1`` leaves, and the
   remainder from the smallest leaf that can take it (best fit again).

Within a leaf, nodes are taken in ``ranked`` order, so the node Score still decides
which nodes of a leaf a job gets. The cost is a few numpy passes over the ranked rows
and a sort of the leaves per level: well under a millisecond for 10,000 nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hal.scheduler.plugins.topology.tree import IntArray, TreeIndex


@dataclass(frozen=True, slots=True)
class Choice:
    rows: IntArray  # ``count`` rows, in no particular order
    leaves: int  # leaf switches spanned
    level: int  # the level of the lowest common switch (0: one leaf)
    domain: int  # its id at that level


def free_per_leaf(index: TreeIndex, ranked: IntArray) -> IntArray:
    return np.bincount(index.leaf_of[ranked], minlength=index.n_leaves).astype(np.intp)


def fitting_domains(index: TreeIndex, free: IntArray, level: int, count: int) -> IntArray:
    """Ids of the level-``level`` domains with at least ``count`` free nodes."""
    up = index.up[level]
    total = np.bincount(up, weights=free, minlength=int(up.max()) + 1)
    return np.flatnonzero(total >= count)


def choose(
    index: TreeIndex, ranked: IntArray, count: int, top: int, free: IntArray | None = None
) -> Choice | None:
    """``count`` rows of ``ranked`` under one level-``top`` domain (see the module
    docstring), or None when no such domain has ``count`` free nodes."""
    if free is None:
        free = free_per_leaf(index, ranked)
    lr = index.leaf_of[ranked]
    fits = free >= count
    if fits.any():
        leaf = int(np.argmin(np.where(fits, free, np.iinfo(np.intp).max)))
        rows = ranked[lr == leaf][:count]
        return Choice(rows, 1, 0, leaf)
    if top == 0:
        return None

    useful = np.flatnonzero(free > 0)  # a leaf without free nodes never helps
    f = free[useful]
    best: tuple[int, int, int] | None = None  # (leaves, level, domain)
    needed_at: list[tuple[IntArray, IntArray]] = []  # per level: (domains, leaves needed)
    for level in range(1, top + 1):
        dom = index.up[level][useful]
        order = np.lexsort((-f, dom))  # by domain, then most free first
        fs, ds = f[order], dom[order]
        starts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
        sizes = np.diff(np.r_[starts, len(ds)])
        cs = np.cumsum(fs)
        within = cs - np.repeat(cs[starts] - fs[starts], sizes)
        position = np.arange(len(ds)) - np.repeat(starts, sizes)
        ok = np.flatnonzero(within >= count)
        domains, first = np.unique(ds[ok], return_index=True)
        needed_at.append((domains, position[ok[first]] + 1))
    top_domains, top_needed = needed_at[-1]
    if len(top_domains) == 0:
        return None
    target = int(top_needed.min())
    for level in range(1, top + 1):
        domains, needed = needed_at[level - 1]
        reach = domains[needed == target]
        if len(reach):
            totals = np.bincount(index.up[level], weights=free)[reach]
            # the fullest domain (least free) first; np.argmin takes the lowest id on ties
            domain = int(reach[int(np.argmin(totals))])
            best = (target, level, domain)
            break
    assert best is not None  # the top level reaches the target by definition
    leaves, level, domain = best
    inside = useful[index.up[level][useful] == domain]
    return _fill(index, ranked, lr, free, inside, count, leaves, level, domain)


def _fill(
    index: TreeIndex,
    ranked: IntArray,
    lr: IntArray,
    free: IntArray,
    inside: IntArray,
    count: int,
    leaves: int,
    level: int,
    domain: int,
) -> Choice:
    """``count`` rows from ``leaves`` of the leaves ``inside`` (ids with free nodes, the
    fewest that can cover ``count``): every free node of the ``leaves - 1`` with the most,
    and the remainder from the smallest leaf that can take it (best fit)."""
    by_free = inside[np.lexsort((inside, -free[inside]))]  # most free first, then lowest id
    full = by_free[: leaves - 1]
    remainder = count - int(free[full].sum())
    rest = by_free[leaves - 1 :]
    candidates = rest[free[rest] >= remainder]
    last = int(candidates[np.lexsort((candidates, free[candidates]))[0]])
    take = np.zeros(index.n_leaves, dtype=np.bool_)
    take[full] = True
    rows = np.concatenate((ranked[take[lr]], ranked[lr == last][:remainder]))
    return Choice(rows, leaves, level, domain)


def choose_block(
    index: TreeIndex, ranked: IntArray, count: int, top: int, free: IntArray | None = None
) -> Choice | None:
    """Slurm's topology/block: ``count`` rows of ``ranked`` inside the **smallest block**
    (a base block at level 0, an aggregation of base blocks above) that has ``count``
    free feasible nodes, at a level ``<= top``; among the blocks of that level that can,
    the one with the **least free capacity** (best fit; ties: the lowest id), so large
    free blocks stay whole. Inside an aggregated block: the fewest base blocks (most free
    first) and the remainder from the smallest base block that can take it. None when no
    block of a level ``<= top`` has ``count`` free nodes."""
    if free is None:
        free = free_per_leaf(index, ranked)
    for level in range(top + 1):
        up = index.up[level]
        totals = np.bincount(up, weights=free, minlength=int(up.max()) + 1)
        ok = np.flatnonzero(totals >= count)
        if len(ok) == 0:
            continue
        domain = int(ok[int(np.argmin(totals[ok]))])  # least free; argmin: lowest id
        lr = index.leaf_of[ranked]
        if level == 0:
            return Choice(ranked[lr == domain][:count], 1, 0, domain)
        inside = np.flatnonzero((up == domain) & (free > 0))
        covered = np.cumsum(np.sort(free[inside])[::-1])
        leaves = int(np.searchsorted(covered, count)) + 1
        return _fill(index, ranked, lr, free, inside, count, leaves, level, domain)
    return None


def leaves_spanned(index: TreeIndex, rows: IntArray) -> int:
    return len(np.unique(index.leaf_of[rows]))
