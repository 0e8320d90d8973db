"""A necessary condition for any start, checked before a pass: does some pending job
find as many nodes as it needs with as many CPUs free on each as it asks per node?

A job starts only if the noderesources Filter passes, on nodes of its partition that are
UP, hold no exclusive job and have at least its CPUs per node free (memory, GPUs,
features and the other Filter plugins only take more nodes away). So when no pending job
passes this count, the pass would start nothing and the simulator skips it, as it
already does when the free CPUs of the whole cluster are fewer than the smallest job
needs. On a busy machine that is the common case after a completion: a few CPUs come
free, but not whole nodes for the wide jobs waiting.

Jobs asking for a range of node counts or for named nodes are not judged: while one of
them waits, every pass runs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from hal.core.job import Job
from hal.scheduler.framework.node_table import IntArray, NodeTable

# (partition, CPUs per node, nodes)
Need = tuple[str, int, int]


class FitScreen:
    def __init__(self) -> None:
        self._pending: dict[Need, int] = {}  # need → pending jobs with it
        self._unjudged = 0  # pending jobs the screen cannot judge

    @staticmethod
    def need(job: Job) -> Need | None:
        spec = job.spec
        if spec.nodes_min != spec.nodes_max or spec.nodelist:
            return None
        n = max(spec.nodes_min, 1)
        return (job.partition, spec.cpus_per_node(n), n)

    def add(self, job: Job) -> Need | None:
        need = self.need(job)
        if need is None:
            self._unjudged += 1
        else:
            self._pending[need] = self._pending.get(need, 0) + 1
        return need

    def remove(self, job: Job) -> None:
        need = self.need(job)
        if need is None:
            self._unjudged -= 1
            return
        left = self._pending[need] - 1
        if left:
            self._pending[need] = left
        else:
            del self._pending[need]

    def any_fits(self, table: NodeTable, needs: Iterable[Need | None] | None = None) -> bool:
        """Whether one of ``needs`` (None: every pending job's) could find its nodes in
        ``table`` now. True whenever a job cannot be judged."""
        if needs is None:
            if self._unjudged:
                return True
            needs = self._pending
        counts: dict[str, IntArray] = {}
        for need in needs:
            if need is None:
                return True
            partition, cpus, nodes = need
            at_least = counts.get(partition)
            if at_least is None:
                at_least = counts[partition] = _nodes_with_at_least(table, partition)
            if cpus < len(at_least) and at_least[max(cpus, 0)] >= nodes:
                return True
        return False


def _nodes_with_at_least(table: NodeTable, partition: str) -> IntArray:
    """``a[c]``: how many nodes of ``partition`` that are UP and hold no exclusive job
    have at least ``c`` CPUs free."""
    usable = table.partition_mask(partition) & table.up & (table.exclusive_on == 0)
    free = np.maximum(table.free_cpus[usable], 0)
    at_least: IntArray = np.cumsum(np.bincount(free)[::-1])[::-1]
    return at_least
