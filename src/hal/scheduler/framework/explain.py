"""``diagnose``: why would a job not start now? A read-only dry run of its cycle.

``hal explain`` asks this on demand, so the main pass keeps no per-job histograms (at
50,000 jobs that would cost more than the pass). The dry run takes the same path as a
real cycle, on a fresh ``PassContext`` of the current snapshot:

    PreFilter (in profile order; the first rejection is the answer, Filter is not run)
    Filter    every plugin's mask on its own, for the job's smallest node count; each
              node is counted once, for the first plugin that turned it away
    TEST_ONLY the full cycle (Score, Placement) to say whether it would start now,
              ignoring the queue in front of it

Nodes a plugin rejects for ``Resources`` without a message of its own are broken down by
what they lack ("insufficient gpu", ...), read from the node table: that is the
framework's own accounting, not the plugin's. Nothing is reserved or committed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from hal.core.job import Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.keys import PLACEMENT_KEY
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.request import NodeRequest, placement_key
from hal.scheduler.framework.runtime import Framework, Mode
from hal.scheduler.framework.status import Code, Status, error


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """``rejections``: (plugin, label, nodes), in profile order, largest first within a
    plugin. ``status``: the job-level verdict (a PreFilter rejection, or the TEST_ONLY
    outcome: SUCCESS when it would start now if nothing were ahead of it)."""

    nodes_total: int
    nodes_needed: int
    nodes_available: int
    rejections: tuple[tuple[str, str, int], ...]
    status: Status
    stopped_at_pre_filter: bool = False

    def summary(self) -> str:
        """``"0/512 nodes available: 384 insufficient gpu, 128 not in partition"``."""
        head = f"{self.nodes_available}/{self.nodes_total} nodes available"
        if not self.rejections:
            return head
        parts = ", ".join(f"{n} {label}" for _plugin, label, n in self.rejections)
        return f"{head}: {parts}"


def _resource_labels(table: NodeTable, request: NodeRequest, rows: BoolArray) -> Counter[str]:
    """What the nodes in ``rows`` lack for ``request``, first matching label each."""
    labels: Counter[str] = Counter()
    left = rows.copy()

    def take(mask: BoolArray, label: str) -> None:
        hit = left & mask
        count = int(np.count_nonzero(hit))
        if count:
            labels[label] += count
            left[hit] = False

    take(~table.up, "down or drained")
    if request.exclusive:
        take(table.jobs_on > 0, "in use (exclusive job)")
    else:
        take(table.exclusive_on > 0, "allocated exclusively")
    if request.gpus:
        take(table.free_gpus < request.gpus, "insufficient gpu")
    if request.memory_bytes is None:
        take(table.free_memory < table.cap_memory, "insufficient memory")
    elif request.memory_bytes:
        take(table.free_memory < request.memory_bytes, "insufficient memory")
    take(table.free_cpus < request.cpus, "insufficient cpu")
    rest = int(np.count_nonzero(left))
    if rest:
        labels["not eligible (features, --exclude or gpu type)"] += rest
    return labels


def diagnose(framework: Framework, ctx: PassContext, job: Job) -> Diagnosis:
    """Dry-run ``job`` against ``ctx`` (which must be a fresh context: plugins may cache
    in ``ctx.data``). Never raises for a plugin bug: it is reported as ``ERROR``."""
    profile = framework.profile
    table = ctx.nodes
    total = len(table)
    spec = job.spec
    needed = max(spec.nodes_min, len(spec.nodelist), 1)
    state = CycleState()
    state.write(PLACEMENT_KEY, placement_key(job))
    skipped: set[str] = set()
    for pre in profile.pre_filter:
        try:
            st = pre.pre_filter(ctx, state, job)
        except Exception as err:  # a plugin bug: report it, as a real cycle would
            st = error(f"{type(err).__name__}: {err}", pre.name)
        if st.code is Code.SKIP:
            skipped.add(pre.name)
        elif st.is_rejection:
            return Diagnosis(total, needed, 0, (), st.with_plugin(pre.name), True)

    request = NodeRequest.for_job(spec, needed)
    mask: BoolArray = np.ones(total, dtype=np.bool_)
    rejections: list[tuple[str, str, int]] = []
    for f in profile.filter:
        if f.name in skipped:
            continue
        try:
            result = f.filter(ctx, state, job, request)
        except Exception as err:
            st = error(f"{type(err).__name__}: {err}", f.name)
            return Diagnosis(total, needed, 0, tuple(rejections), st)
        turned_away = mask & ~result.feasible
        if np.any(turned_away):
            if result.message:
                labels = Counter({result.message: int(np.count_nonzero(turned_away))})
            elif result.reason is PendingReason.RESOURCES:
                labels = _resource_labels(table, request, turned_away)
            else:
                labels = Counter({result.reason.value: int(np.count_nonzero(turned_away))})
            for label, count in sorted(labels.items(), key=lambda kv: (-kv[1], kv[0])):
                rejections.append((f.name, label, count))
        mask &= result.feasible
    available = int(np.count_nonzero(mask))
    outcome = framework.place(
        ctx.fork(now=ctx.now, nodes=table, running=ctx.running), job, Mode.TEST_ONLY
    )
    return Diagnosis(total, needed, available, tuple(rejections), outcome.status)
