"""Cloud groups next to the owned machine: the trace replayed with the autoscaler's
burst decision, to measure cost against wait (``hal bench cloud``).

The owned machine is the simulator's (``hal.sim.engine``): the real scheduler starts
every job it runs. Beside it, node groups (``NodeGroup``: price, boot time, market,
interruption rate) lend nodes. Every ``interval_s`` (the server's autoscaler pass) the
waiting jobs are judged by one of four policies:

- ``never``: no new nodes;
- ``wait_n``: a job that has waited ``wait_n_s`` gets nodes from the group whose nodes
  cost least an hour (Slurm's power saving and most autoscalers: a pending time, then
  the cheapest capacity that fits; HAL's autoscaler before ``hal.cloud.burst``);
- ``hal``: the server's decision (``hal.cloud.burst.decide``): nodes only when the job's
  expected start on the owned machine (the scheduler's own forecast, ``squeue
  --start``, with the learned predictor) is later than a group's boot + its patience,
  from the group where it is expected to cost least to finish;
- ``oracle``: the same decision, with the jobs' true run times in the scheduler, its
  forecast and the costs (the ``perfect`` predictor).

The nodes are then chosen by the server's planner (``hal.cloud.autoscaler
.plan_scale_up``). A job given nodes leaves the owned queue, starts once they booted,
and runs its run time there; nodes are made for one job and removed at its end (not
kept idle for others). A spot node is taken back at a random time (each node a Poisson
process of the group's ``interruption_rate`` per hour, drawn from a seeded generator):
the job loses its work since its last checkpoint (``checkpoint_s``; 0: all of it), is
requeued on the owned queue in its place, and may get nodes again. Nodes are paid from
their request to their end or interruption (the boot included).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hal.cloud.autoscaler import Waiting, holds, plan_scale_up
from hal.cloud.burst import Offer, decide, offer
from hal.core.errors import InvalidRequest
from hal.core.job import Job
from hal.core.node_groups import NodeGroup
from hal.core.patience import Patience
from hal.predict import planned_runtime
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.sim.engine import JobOutcome, SimRun, Simulation, _Replay, final_state
from hal.sim.fitscreen import Need

POLICIES = ("never", "wait_n", "hal", "oracle")


@dataclass(frozen=True, slots=True)
class CloudModel:
    """The groups beside the owned machine and how the autoscaler runs."""

    groups: tuple[NodeGroup, ...]
    policy: str = "hal"  # one of POLICIES
    interval_s: float = 60.0  # the autoscaler's pass ([cloud] interval_seconds)
    pending_s: float = 0.0  # [cloud] pending_seconds: the floor of every policy
    # every job's --burst-after (hal, oracle)
    patience: Patience = field(default_factory=Patience)
    wait_n_s: float = 3600.0  # wait_n's N
    # wait_n with HAL's choice of group (expected cost) instead of the cheapest hour: no
    # gate, so what the gate adds shows apart from what the choice of group adds
    costed: bool = False
    checkpoint_s: float = 0.0  # jobs checkpoint this often (0: never; they lose it all)
    seed: int = 1

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InvalidRequest(
                f"unknown cloud policy {self.policy!r}; choose from {', '.join(POLICIES)}"
            )
        if self.interval_s <= 0:
            raise InvalidRequest(f"the autoscaler's interval must be > 0 s, not {self.interval_s}")


@dataclass(frozen=True, slots=True)
class CloudRun:
    run: SimRun
    cost: float  # paid for cloud nodes, in the groups' currency
    lost_work_s: float  # run time lost to interruptions (seconds of the jobs' runs)
    lost_cpu_s: float  # the same, times the job's processors
    bursts: int  # times a job got cloud nodes
    interruptions: int
    by_group: dict[str, int]  # group → jobs it ran (each burst)
    cloud_jobs: int  # jobs that finished on cloud nodes


@dataclass(slots=True)
class _Burst:
    job: Job
    nodes: tuple[tuple[NodeGroup, str], ...]
    asked: float  # when the nodes were asked for (they are paid from then)
    start: float  # when they joined
    end: float  # when it ends there, or is interrupted
    interrupted: bool


class _CloudReplay(_Replay):
    def __init__(self, sim: Simulation, model: CloudModel) -> None:
        if model.policy in ("hal", "oracle"):
            # the planner forecasts starts only in passes that explain (the server's);
            # the placements are the same either way
            sim.explain = True
        super().__init__(sim)
        self.model = model
        self.policy = model.policy
        self.forecasting = model.policy in ("hal", "oracle")
        self.updates = self.forecasting
        self.expected: dict[int, float | None] = {}  # the last pass's forecast starts
        self.events: list[tuple[float, int]] = []  # (end or interruption, job id)
        self.burst: dict[int, _Burst] = {}
        self.in_use: set[str] = set()
        self.rng = np.random.default_rng(model.seed)
        self.original = dict(self.by_id)  # (by_id's runs shrink with checkpoints kept)
        self.next_tick = self.jobs[0].submit if self.jobs else 0.0
        self.requeued = False
        self.cost = self.lost_s = self.lost_cpu_s = 0.0
        self.bursts = self.interruptions = self.cloud_jobs = 0
        self.by_group = {g.name: 0 for g in model.groups}

    # -- the loop: the engine's, with the autoscaler's passes and the cloud's events --------

    def loop(self) -> None:
        while self.i < self.n_jobs or self.ends or self.events or self._may_burst():
            now = self._next_instant()
            moved = self._expire(now)
            completed = self._complete(now)
            self.requeued = self._cloud_events(now)
            smallest_new, new_needs = self._arrive(now)
            snap = self._pass_snapshot(now, moved, completed, smallest_new, new_needs)
            if snap is not None:
                self._pass(now, snap)
            elif self.pending:
                self.skipped += 1
            if now >= self.next_tick:
                self._autoscale(now)
                self.next_tick = now + self.model.interval_s
            self.series_t.append(now)
            self.series_q.append(len(self.pending))
            self.series_b.append(self.busy)

    def _may_burst(self) -> bool:
        """Whether an autoscaler pass may still make nodes for a waiting job when nothing
        else is left to happen: a job whose floor (or wait_n's N) is still ahead, or one
        the forecast has not judged since the machine emptied."""
        if self.policy == "never" or not self.pending:
            return False
        now = self.clock.now()
        ahead = max(self.model.pending_s, self.model.wait_n_s if self.policy == "wait_n" else 0)
        return any(
            now - j.submit_time <= ahead + self.model.interval_s for j in self.pending.values()
        )

    def _next_instant(self) -> float:
        expiries, running = self.expiries, self.running
        t_next = self.jobs[self.i].submit if self.i < self.n_jobs else math.inf
        if self.ends and self.ends[0][0] < t_next:
            t_next = self.ends[0][0]
        if self.events and self.events[0][0] < t_next:
            t_next = self.events[0][0]
        while expiries and expiries[0][1] not in running:
            heapq.heappop(expiries)
        if expiries and expiries[0][0] < t_next:
            t_next = expiries[0][0]
        if self.pending and self.policy != "never" and self.next_tick < t_next:
            t_next = self.next_tick
        now = max(float(t_next), self.clock.now())
        self.clock.set(now)
        self.revision += 1
        return now

    def _pass_snapshot(
        self,
        now: float,
        moved: list[float],
        completed: bool,
        smallest_new: float,
        new_needs: list[Need | None],
    ) -> ClusterSnapshot | None:
        """The engine's rule, and, where the decision reads forecasts, a pass whenever
        the queue or the running jobs changed (a pass that starts nothing still gives
        the waiting jobs their expected starts)."""
        changed = completed or self.requeued
        snap = super()._pass_snapshot(now, moved, changed, smallest_new, new_needs)
        if snap is not None or not self.forecasting or not self.pending:
            return snap
        if not (changed or moved or new_needs):
            return None
        return ClusterSnapshot(
            revision=self.revision,
            now=now,
            nodes=self.nodes,
            partitions=self.partitions,
            pending=tuple(self.pending.values()),
            running=tuple(self.running.values()),
        )

    def _passed(self, result: PassResult) -> None:
        """The waiting jobs' expected starts: the head's reservation from the plan, the
        others' from the planner's forecast (``Scheduler.forecast``), as the server
        shows them in ``squeue --start``."""
        if not self.forecasting:
            return
        plan = result.plan
        starts: dict[int, float | None] = {u.job_id: u.expected_start for u in plan.updates}
        for u in self.scheduler.forecast(plan):
            starts[u.job_id] = u.expected_start
        self.expected = {jid: starts.get(jid) for jid in self.pending}

    # -- the autoscaler ---------------------------------------------------------------------

    def _autoscale(self, now: float) -> None:
        """One autoscaler pass: the jobs that get nodes leave the queue for them."""
        if self.policy == "never" or not self.pending:
            return
        waiting = [w for job in self.pending.values() if (w := self._judge(job, now)) is not None]
        if not waiting:
            return
        made: dict[int, list[tuple[NodeGroup, str]]] = {}
        by_name = {g.name: g for g in self.model.groups}
        for up in plan_scale_up(waiting, self.model.groups, self.in_use, {}):
            for node, jobs in up.per_node.items():
                for jid in jobs:
                    made.setdefault(jid, []).append((by_name[up.group], node))
        for jid, nodes in made.items():
            self._launch(self.pending[jid], tuple(nodes), now)

    def _judge(self, job: Job, now: float) -> Waiting | None:
        """The job as the autoscaler's planner takes it, or None where it waits."""
        waited = now - job.submit_time
        if waited < self.model.pending_s:
            return None
        if self.policy == "wait_n":
            if waited < self.model.wait_n_s:
                return None
            if not self.model.costed:
                return Waiting(job.id, job.spec, self.partitions)
            costs = {o.group: o.total for o in self._offers(job, now) if math.isfinite(o.total)}
            return Waiting(job.id, job.spec, self.partitions, costs=costs)
        if job.id not in self.expected:
            return None  # no pass has forecast it yet
        assert self.predictor is not None
        decision = decide(
            job.id,
            now,
            waited_s=waited,
            expected_start=self.expected[job.id],
            patience_s=self.model.patience.at(job.time_limit_s),
            floor_s=self.model.pending_s,
            runtime_s=planned_runtime(self.predictor, job),
            offers=self._offers(job, now),
        )
        if decision.group is None:
            return None
        return Waiting(job.id, job.spec, self.partitions, costs=decision.costs)

    def _offers(self, job: Job, now: float) -> list[Offer]:
        """Each group's offer for the job, as the server makes them: the risk of spot
        over the time limit where run times are predicted (the oracle's: the true run)."""
        assert self.predictor is not None
        runtime = planned_runtime(self.predictor, job)
        nodes = max(job.spec.nodes_min, 1)
        return [
            offer(
                g,
                nodes,
                runtime,
                now,
                checkpoint_s=self.model.checkpoint_s,
                risk_s=float(job.time_limit_s) if self.policy != "oracle" else None,
            )
            for g in self.model.groups
            if holds(job.spec, g.template(g.name))
        ]

    def _launch(self, job: Job, nodes: tuple[tuple[NodeGroup, str], ...], now: float) -> None:
        """The job leaves the owned queue for its new nodes: it starts once the slowest
        boots, and ends or is interrupted (the first of its spot nodes taken back)."""
        del self.pending[job.id]
        self.screen.remove(job)
        self.expected.pop(job.id, None)
        self.in_use.update(name for _, name in nodes)
        tj = self.by_id[job.id]
        start = now + max(g.boot_seconds for g, _ in nodes)
        end = start + min(tj.run, float(job.time_limit_s))
        taken = math.inf
        for g, _ in nodes:
            if g.interruption_rate > 0:
                taken = min(taken, now + self.rng.exponential(3600.0 / g.interruption_rate))
        burst = _Burst(job, nodes, now, start, min(end, taken), taken < end)
        self.burst[job.id] = burst
        heapq.heappush(self.events, (burst.end, job.id))
        self.bursts += 1
        for name in {g.name for g, _ in nodes}:
            self.by_group[name] += 1

    def _cloud_events(self, now: float) -> bool:
        """Cloud runs that end or are interrupted now; whether a job was requeued."""
        requeued = False
        while self.events and self.events[0][0] <= now:
            _, jid = heapq.heappop(self.events)
            burst = self.burst.pop(jid)
            self.in_use.difference_update(name for _, name in burst.nodes)
            self.cost += sum(g.price_per_hour for g, _ in burst.nodes) * (now - burst.asked) / 3600
            if burst.interrupted:
                self._requeue(burst, now)
                requeued = True
            else:
                self._cloud_end(burst, now)
        return requeued

    def _cloud_end(self, burst: _Burst, now: float) -> None:
        job, tj = burst.job, self.by_id[burst.job.id]
        state = final_state(tj)
        self.outcomes[job.id] = JobOutcome(tj, burst.start, now, state)
        self.cloud_jobs += 1
        if self.predictor is not None:
            ran = job.evolve(state=state, start_time=burst.start, end_time=now)
            self.predictor.observe(ran, now - burst.start)

    def _requeue(self, burst: _Burst, now: float) -> None:
        """An interrupted job loses its run since its last checkpoint and waits again
        in its place (its submission time kept, as a preempted job's)."""
        job, tj = burst.job, self.by_id[burst.job.id]
        ran = max(now - burst.start, 0.0)
        every = self.model.checkpoint_s
        kept = math.floor(ran / every) * every if every > 0 else 0.0
        lost = ran - kept
        self.interruptions += 1
        self.lost_s += lost
        self.lost_cpu_s += lost * tj.procs
        if kept > 0:
            self.by_id[job.id] = replace(tj, run=max(tj.run - kept, 1.0))
        again = job.evolve(restarts=job.restarts + 1)
        self.pending[job.id] = again
        self.screen.add(again)
        heapq.heappush(self.need, (job.spec.ntasks * job.spec.cpus_per_task, job.id))
        self.arrived.append(again)

    def cloud_result(self, wall0: float) -> CloudRun:
        run = self.result(wall0)
        # each outcome with the job as the trace has it (a checkpointed run's rest aside)
        outcomes = tuple(replace(o, job=self.original[o.job.id]) for o in run.outcomes)
        return CloudRun(
            replace(run, outcomes=outcomes),
            self.cost,
            self.lost_s,
            self.lost_cpu_s,
            self.bursts,
            self.interruptions,
            self.by_group,
            self.cloud_jobs,
        )


def replay_cloud(sim: Simulation, model: CloudModel, wall0: float | None = None) -> CloudRun:
    """Replay ``sim``'s jobs on its machine with ``model``'s groups beside it."""
    import gc
    import time

    t0 = time.perf_counter() if wall0 is None else wall0
    replay = _CloudReplay(sim, model)
    was = gc.isenabled()
    gc.disable()
    try:
        replay.loop()
    finally:
        if was:
            gc.enable()
    return replay.cloud_result(t0)


def cloud_summary(result: CloudRun) -> dict[str, Any]:
    """Mean wait (the time a job's end came later than its run from its submission:
    boots, queues and lost work included), mean bounded slowdown (10 s), cloud cost and
    lost work, over the jobs that ended."""
    outcomes = [o for o in result.run.outcomes if o.end == o.end]
    waits = np.array([o.end - o.job.submit - o.job.run for o in outcomes], dtype=np.float64)
    bsld = np.array(
        [max(1.0, (o.end - o.job.submit) / max(o.job.run, 10.0)) for o in outcomes],
        dtype=np.float64,
    )
    return {
        "jobs": len(outcomes),
        "unfinished": len(result.run.outcomes) - len(outcomes),
        "mean_wait_s": round(float(waits.mean()), 1) if len(waits) else 0.0,
        "mean_bsld": round(float(bsld.mean()), 3) if len(bsld) else 0.0,
        "cloud_cost": round(result.cost, 2),
        "lost_work_s": round(result.lost_work_s, 1),
        "lost_cpu_s": round(result.lost_cpu_s, 1),
        "bursts": result.bursts,
        "interruptions": result.interruptions,
        "cloud_jobs": result.cloud_jobs,
        "by_group": dict(result.by_group),
        "passes": result.run.passes,
        "wall_s": round(result.run.wall_s, 2),
    }


def sim_groups(
    cpus_per_node: int,
    memory_per_node: int,
    nodes: int,
    prices: Sequence[tuple[str, str, float, float]],
    boot_s: float,
) -> tuple[NodeGroup, ...]:
    """Groups of ``nodes`` nodes of the owned machine's size: (name, market, price per
    node-hour, interruption rate per node-hour) each."""
    from hal.core.resources import ResourceVector

    width = max(4, len(str(nodes)))
    return tuple(
        NodeGroup(
            name=name,
            provider="local",
            nodes=tuple(f"{name}{i:0{width}d}" for i in range(nodes)),
            resources=ResourceVector(cpus_per_node, memory_per_node, 0),
            price_per_hour=price,
            market=market,
            boot_seconds=boot_s,
            interruption_rate=rate,
        )
        for name, market, price, rate in prices
    )
