"""A provider taking a node's machine back (docs/admin/cloud.md, "Spot interruptions").

An agent run with ``--interruption-notice`` reads its instance's metadata service and
sends what it finds with its syncs (``AgentSync.notices``). On an interruption notice
(EC2 spot's instance action, about two minutes ahead) the server, in one commit:

- drains the node (reason ``cloud: spot interruption at HH:MM:SS``, the machine's end
  in UTC), so nothing new starts there; the autoscaler removes it once its jobs are gone;
- ends each job running there, marked ``INTERRUPTED``, the way a preemption victim in
  requeue mode ends (``hal.state.preempt``): a job with ``--signal`` is sent its signal
  now and runs on for its SECS (at most ``SIGNAL_GRACE_MAX_S``, and never past the
  machine's end less KillWait), time to checkpoint; any other is ended at once (SIGTERM,
  SIGKILL after KillWait);
- a job that may be requeued on a node failure (``--requeue``, the default; not an
  allocation) goes back to the queue with its submit time, so its place; its run ends
  ``PREEMPTED`` (sacct -D, with ``Interrupted`` and ``LostWork``). Any other ends
  ``NODE_FAIL``, as Slurm ends a job whose node fails;
- records ``cloud.interrupted`` (node, group, the notice's action and time, the jobs).

A node gets this once: a second notice for a node already drained for one changes
nothing. A rebalance recommendation only drains the node (reason ``cloud: rebalance
recommended at HH:MM:SS``): its jobs run on, nothing new starts there, and it is removed
once idle. A machine that goes without a notice is a silent node (``agents.check_nodes``):
NODE_FAIL, requeued by the same rule.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hal.core.job import Job
from hal.core.node import Node
from hal.core.preemption import GRACE_END
from hal.core.states import JobState, NodeState
from hal.state import preempt
from hal.state.node_reasons import server_user
from hal.state.store import EventRow
from hal.state.store_protocol import StateTransaction
from hal.wire.agent import InterruptionNotice

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

# job.extra mark of a run an interruption ends: "NOTICE ACTION_TIME" (Unix times: when the
# server had the notice, when the machine goes); dropped when the job is requeued
INTERRUPTED = preempt.INTERRUPTED
INTERRUPTION_REASON = "cloud: spot interruption at "
REBALANCE_REASON = "cloud: rebalance recommended at "


def _clock(unix: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(unix))


def interrupted_at(extra: dict[str, str]) -> float | None:
    """When the server had the notice that ended the run, from its mark (None: none)."""
    mark = extra.get(INTERRUPTED)
    return float(mark.split()[0]) if mark else None


def lost_work(job: Job, state: str, end: float) -> float | None:
    """Seconds of a run's work lost with it (sacct's LostWork): None for a run that did
    not end ``PREEMPTED`` or ``NODE_FAIL``. Without a checkpoint HAL can see, the whole
    run's elapsed time. A ``--signal`` job that was sent its signal (an interruption's or
    a preemption's) and ended on its own before its grace time was over has handled it:
    it checkpointed, so only the time from the signal to its end counts."""
    if state not in (JobState.PREEMPTED.value, JobState.NODE_FAIL.value):
        return None
    if job.start_time is None:
        return 0.0
    elapsed = max(0.0, end - job.start_time)
    grace_end = job.extra.get(GRACE_END)
    signalled = interrupted_at(job.extra) or job.extra.get(preempt.PREEMPT_TIME)
    handled = job.spec.signal is not None and signalled is not None
    if handled and grace_end and end < float(grace_end):
        return min(elapsed, max(0.0, end - float(signalled or 0.0)))
    return elapsed


async def on_notices(cluster: Cluster, name: str, notices: Sequence[InterruptionNotice]) -> None:
    """Act on what node ``name``'s agent read (an interruption first)."""
    for notice in sorted(notices, key=lambda n: n.kind != "interruption"):
        if notice.kind == "interruption":
            await interrupt(cluster, name, notice)
        else:
            await rebalance(cluster, name, notice)


async def interrupt(cluster: Cluster, name: str, notice: InterruptionNotice) -> list[int]:
    """Drain node ``name`` and move its jobs away (the module's docstring); the ids of
    the jobs it ended ([] when the node had this already, or is not known)."""
    from hal.state import agents

    async with cluster.change() as change:
        node = cluster.nodes.get(name)
        if node is None or node.reason.startswith(INTERRUPTION_REASON):
            return []
        now = cluster.clock.now()
        new_node = _drained(node, INTERRUPTION_REASON + _clock(notice.time), now)
        jobs = [_interrupted(cluster, j, notice, now) for j in _jobs_on(cluster, name)]
        data = {
            "group": _group_of(cluster, name),
            "action": notice.action,
            "time": notice.time,
            "notice_time": now,
            "jobs": [j.id for j in jobs],
        }
        events = [
            _node_event(new_node, now),
            EventRow(now, "cloud.interrupted", node=name, data=data),
            *(
                EventRow(now, "job.interrupted", job_id=j.id, state=j.state.value, data=data)
                for j in jobs
            ),
        ]

        def extra(tx: StateTransaction) -> None:
            tx.upsert_node(new_node)

        await change.commit(jobs, events, extra)
        cluster.nodes[name] = new_node
        for job in jobs:
            sig = job.spec.signal
            if sig is not None and job.launched and job.state is not JobState.SUSPENDED:
                agents.send_signal(cluster, job, sig.signum, batch_only=sig.batch_only)
            if job.state is JobState.COMPLETING:
                agents.send_end(cluster, job)
        cluster.changed.set()
    return [j.id for j in jobs]


async def rebalance(cluster: Cluster, name: str, notice: InterruptionNotice) -> None:
    """Drain node ``name`` at a rebalance recommendation, unless it is drained or down
    already (an operator's, an interruption's)."""
    async with cluster.change() as change:
        node = cluster.nodes.get(name)
        if node is None or node.state is not NodeState.UP:
            return
        now = cluster.clock.now()
        new_node = _drained(node, REBALANCE_REASON + _clock(notice.time), now)
        data = {"group": _group_of(cluster, name), "time": notice.time}
        events = [
            _node_event(new_node, now),
            EventRow(now, "cloud.rebalance_recommended", node=name, data=data),
        ]

        def extra(tx: StateTransaction) -> None:
            tx.upsert_node(new_node)

        await change.commit([], events, extra)
        cluster.nodes[name] = new_node
        cluster.changed.set()


def _drained(node: Node, reason: str, now: float) -> Node:
    return node.evolve(
        state=NodeState.DRAIN, reason=reason, reason_user=server_user(), reason_time=now
    )


def _node_event(node: Node, now: float) -> EventRow:
    data = {"reason": node.reason, "user": node.reason_user}
    return EventRow(now, "node.updated", node=node.name, state=node.state.value, data=data)


def _jobs_on(cluster: Cluster, name: str) -> list[Job]:
    """The jobs with a part on node ``name`` still to end (not ending already)."""
    return [
        j
        for j in cluster.unfinished.values()
        if j.state in (JobState.RUNNING, JobState.SUSPENDED)
        and j.allocation is not None
        and name in j.allocation.nodes
        and INTERRUPTED not in j.extra
    ]


def _interrupted(cluster: Cluster, job: Job, notice: InterruptionNotice, now: float) -> Job:
    """``job`` marked to end (and be requeued, where node failures requeue it): RUNNING
    for its grace time if it has ``--signal``, else COMPLETING."""
    extra = {**job.extra, INTERRUPTED: f"{now!r} {notice.time!r}"}
    if job.spec.requeue and not job.spec.interactive:
        extra[preempt.REQUEUE] = "1"
    grace = _grace(job, notice, now, cluster.config.kill_wait_seconds)
    if grace > 0 and job.state is JobState.RUNNING and job.launched:
        extra[GRACE_END] = repr(now + grace)  # ended then (preempt.end_graced)
        return job.evolve(extra=extra)
    return job.evolve(state=JobState.COMPLETING, extra=extra)


def _grace(job: Job, notice: InterruptionNotice, now: float, kill_wait: float) -> float:
    """A ``--signal`` job's time to checkpoint: its SECS (at most
    ``SIGNAL_GRACE_MAX_S``), ending KillWait before the machine goes at the latest."""
    sig = job.spec.signal
    if sig is None:
        return 0.0
    want = float(min(sig.seconds_before, preempt.SIGNAL_GRACE_MAX_S))
    return max(0.0, min(want, notice.time - now - kill_wait))


def _group_of(cluster: Cluster, name: str) -> str:
    return next((g.name for g in cluster.config.cloud.groups if name in g.nodes), "")
