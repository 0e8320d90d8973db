"""``PriorityService``: the server's multifactor priorities and fair-share usage.

Priority is computed here, outside the scheduling pass (docs/adr/0006-priority.md): the
pass only sorts by ``job.priority``. The service

* **at start-up** rebuilds the decayed usage of every association from accounting: the
  runs that ended within 40 half-lives (older ones weigh less than 2^-40) are read from
  the store in pages and charged (``UsageLedger`` has a closed form, so the result is the
  same number it would have reached incrementally); jobs still running are charged live;
* **on every committed job change** (``Cluster.on_jobs_changed``) charges runs that
  ended, starts charging runs that started, and gives new, requeued or updated pending
  jobs their priority at once, so a job is never scheduled with the submit-time
  placeholder;
* **every ``calc_period``** (Slurm's PriorityCalcPeriod) recomputes the fair-share
  standing and the priority of every pending job (age grows, usage decays).

Priorities live in the mirror only (like pending reasons): they are recomputed from the
same inputs after a restart. Each calculation keeps the factors it used (Slurm's
``job_ptr->prio_factors``), and ``sprio`` and ``hal explain`` show those, not fresh ones:
between two calculations age grows and usage moves, and factors computed at the read
would no longer add up to the priority the queue is ordered by. Reads (``pending``,
``calculated``, ``shares``) change nothing. A job whose priority an administrator set
(``priority_fixed``) keeps it. Without ``[priority]`` in the config, priorities are left
as given at submit (basic); usage and ``sshare`` work either way. The fair-share factor is
Slurm's classic one or fair tree's rank, as ``[priority] fairshare_algorithm`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from hal.core.job import Job
from hal.core.priority import PriorityPolicy
from hal.core.states import JobState
from hal.core.suspension import suspended_in, suspended_seconds
from hal.scheduler.plugins.multifactor import (
    Assoc,
    Factors,
    MultifactorPriority,
    ShareRow,
    ShareTree,
    Standing,
    UsageLedger,
    Weighted,
    allocation_rate,
    billing_rate,
)
from hal.state.cluster import Cluster
from hal.state.rows import FinishedRun
from hal.state.store import sql_store
from hal.state.suspension import SUSPENDED_AT
from hal.state.usage_memo import UsageMemo
from hal.wire.priority import PriorityWeightsInfo


def weights_info(policy: PriorityPolicy) -> PriorityWeightsInfo:
    """``policy`` as sprio's header and ``scontrol show config`` show it."""
    return PriorityWeightsInfo(
        age=policy.weight_age,
        fairshare=policy.weight_fairshare,
        job_size=policy.weight_job_size,
        partition=policy.weight_partition,
        qos=policy.weight_qos,
        max_age_seconds=policy.max_age_s,
        favor_small=policy.favor_small,
        decay_half_life_seconds=policy.decay_half_life_s,
        calc_period_seconds=policy.calc_period_s,
    )


log = logging.getLogger("hal.priority")
HISTORY_PAGE = 5_000
Charge = tuple[Assoc, float, float, float]  # a finished run's (assoc, rate, start, end)


@dataclass(frozen=True, slots=True)
class JobPriority:
    """One pending job's priority and where it comes from (a line of ``sprio``, the
    factors of ``hal explain``): the factors of the calculation that gave the job its
    priority, and the fair-share row its factor was read from (None: an association
    the standing did not have yet, factor 1)."""

    job: Job
    account: str
    factors: Factors
    weighted: Weighted
    share: ShareRow | None = None

    @property
    def priority(self) -> int:
        """What the queue is sorted by: an administrator's number, else the sum of these
        factors, which the calculation stored as ``job.priority``; 0 while held."""
        if self.job.priority_fixed:
            return self.job.shown_priority
        return 0 if self.job.held else self.weighted.priority


class PriorityService:
    def __init__(self, cluster: Cluster, policy: PriorityPolicy) -> None:
        self.cluster = cluster
        self.ledger = UsageLedger(policy.decay_half_life_s)
        self.configure(policy)
        self.standing: Standing = self.tree.standing({})  # of the last calculation
        # pending job id → the calculation that gave it its priority (Slurm's prio_factors)
        self._calculated: dict[int, JobPriority] = {}
        self._running: dict[int, tuple[Assoc, float, float]] = {}  # id → (assoc, rate, start)
        self._paused: set[int] = set()  # suspended jobs charged up to their suspension
        # a standby's read ahead of the history (``preload``), and the policy it charged by
        self._history: UsageMemo[Charge] | None = None
        self._history_policy: PriorityPolicy | None = None
        # of the last ``start``: (runs taken as read ahead, runs charged); None: read cold
        self.history_read_ahead: tuple[int, int] | None = None
        cluster.on_jobs_changed(self._on_jobs)

    def configure(self, policy: PriorityPolicy) -> None:
        """Take ``policy`` (and the cluster's partitions, for PriorityJobFactor): at
        start, and at ``scontrol reconfigure`` (then ``recalculate``). The usage charged
        so far is kept, under the associations it was charged to, as Slurm keeps an
        association's usage across a reconfigure; from now on it decays with the new
        half-life, and runs that start from now on are charged at the new GPU weight."""
        self.policy = policy
        # classic or fair tree ([priority] fairshare_algorithm): the factor jobs get and
        # the rows sshare shows both come from this tree's standing
        self.tree = ShareTree(policy.accounts, policy.users, policy.fairshare_algorithm)
        self._assocs: dict[tuple[str, str | None], Assoc] = {}  # (user, account): its assoc
        self.calculator = MultifactorPriority(policy, tuple(self.cluster.partitions.values()))
        if policy.decay_half_life_s != self.ledger.half_life_s:
            self.ledger.advance(self.cluster.clock.now())  # decayed at the old rate so far
            self.ledger.half_life_s = policy.decay_half_life_s

    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    def assoc(self, job: Job) -> Assoc:
        return (self.tree.account_for(job.spec.user, job.spec.account), job.spec.user)

    # -- lifecycle ----------------------------------------------------------------------
    def _cutoff(self, now: float) -> float | None:
        """The oldest end of a run charged at start (None: every run)."""
        window = self.policy.usage_window_s
        return None if window is None else now - window

    def _charge(self, run: FinishedRun) -> Charge:
        """What ``run`` is charged: to its association, at its rate, from its start moved
        later by its suspended time (also a suspension it ended in) to its end."""
        rate = allocation_rate(run.allocation, self.policy.usage_gpu_weight)
        start = run.start + suspended_in(run.marks, run.end)
        assoc = self._assocs.get((run.user, run.account))
        if assoc is None:  # (one tuple per association: a standby keeps a charge per run)
            assoc = (self.tree.account_for(run.user, run.account), run.user)
            self._assocs[(run.user, run.account)] = assoc
        return assoc, rate, start, run.end

    def preload(self) -> int:
        """A standby's read ahead of the history ``start`` charges (on a thread, every
        ``hal.server.standby.PRELOAD_S``): the runs that ended since its last read ahead,
        or changed since, are fetched (``UsageMemo``); returns how many runs it keeps."""
        memo = self._history
        if memo is None or self._history_policy is not self.policy:
            memo = self._history = UsageMemo(self._charge)
            self._history_policy = self.policy
        store = sql_store(self.cluster.store)
        return len(store.finished_usage_changed(self._cutoff(self.cluster.clock.now()), memo))

    async def start(self) -> None:
        """After ``cluster.load()``: charge the accounting history, then calculate. After a
        standby's ``preload`` only the runs that ended or changed since are read: charged
        in the same order as a cold read, the usage is the same to the last bit."""
        now = self.cluster.clock.now()
        cutoff = self._cutoff(now)
        record = self.ledger.record
        memo, self._history = self._history, None  # (used once: the leader keeps the ledger)
        self.history_read_ahead = None
        if memo is not None and self._history_policy is self.policy:
            store = sql_store(self.cluster.store)
            charges = await self.cluster.db(store.finished_usage_changed, cutoff, memo)
            self.history_read_ahead = (memo.hits, len(charges))
            for assoc, rate, start, end in charges:
                record(assoc, rate, start, end)
        else:
            await self._charge_history(cutoff)
        for job in self.cluster.unfinished.values():
            if job.state is JobState.SUSPENDED and job.start_time is not None:
                # what it ran before its suspension; charged again from its resume
                until = float(job.extra.get(SUSPENDED_AT, now))
                rate = billing_rate(job, self.policy.usage_gpu_weight)
                start = job.start_time + suspended_seconds(job, until)
                self.ledger.record(self.assoc(job), rate, start, until)
                self._paused.add(job.id)
            self._track(job)
        self.recalculate()

    async def _charge_history(self, cutoff: float | None) -> None:
        """A cold read of the history: every run that ended at or after ``cutoff``, in
        pages, latest end first."""
        store = self.cluster.store
        before: tuple[float, int] | None = None
        record, charge = self.ledger.record, self._charge
        while True:
            page = await self.cluster.db(store.finished_usage, HISTORY_PAGE, before)
            for run in page:
                if cutoff is not None and run.end < cutoff:
                    return
                record(*charge(run))
            if len(page) < HISTORY_PAGE:
                return
            last = page[-1]
            before = (last.end, last.id)

    async def run(self, stop: asyncio.Event) -> None:
        """Recalculate every ``calc_period`` until ``stop`` is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.policy.calc_period_s)
            if stop.is_set():
                break
            try:
                self.recalculate()
            except Exception:
                log.exception("priority calculation failed")

    # -- calculation --------------------------------------------------------------------
    def usage(self, now: float) -> Mapping[Assoc, float]:
        return self.ledger.totals(now, self._running.values())

    def recalculate(self) -> None:
        """Fresh fair-share standing; fresh priorities for every pending job."""
        now = self.cluster.clock.now()
        pending = [j for j in self.cluster.unfinished.values() if j.state is JobState.PENDING]
        self.standing = self._standing(now, pending)
        self._calculated = {}  # the jobs no longer pending drop out
        if self.enabled:
            self._assign(pending, now)

    def _standing(self, now: float, pending: Iterable[Job]) -> Standing:
        return self.tree.standing(self.usage(now), {self.assoc(j) for j in pending})

    def _cluster_size(self) -> tuple[int, int]:
        nodes = self.cluster.nodes.values()
        return len(nodes), sum(n.resources.cpus for n in nodes)

    def evaluate(self, job: Job, now: float | None = None) -> JobPriority:
        """The factors ``job`` would get from a calculation at ``now`` (default: the
        clock) with the last calculation's fair-share standing. Stores nothing."""
        when = self.cluster.clock.now() if now is None else now
        return self._evaluate(job, when, self._cluster_size())

    def _evaluate(self, job: Job, now: float, size: tuple[int, int]) -> JobPriority:
        account, user = self.assoc(job)
        fairshare = self.standing.factor(account, user)
        factors = self.calculator.factors(job, now, fairshare, size)
        share = self.standing.row(account, user)
        return JobPriority(job, account, factors, self.calculator.weigh(factors), share)

    def _assign(self, jobs: Iterable[Job], now: float) -> None:
        """Calculate ``jobs``' priorities: store each one's factors, and its priority
        as the job's unless an administrator set it (then the factors are only what
        REST shows with ``fixed``)."""
        mirror, unfinished = self.cluster.jobs, self.cluster.unfinished
        size = self._cluster_size()
        for job in jobs:
            current = mirror.get(job.id)
            if current is None or current.state is not JobState.PENDING:
                continue
            found = self._evaluate(current, now, size)
            value = found.weighted.priority
            if not current.priority_fixed and value != current.priority:
                current = current.evolve(priority=value)
                mirror[job.id] = unfinished[job.id] = current
            self._calculated[job.id] = replace(found, job=current)

    # -- bookkeeping ----------------------------------------------------------------------
    def _track(self, job: Job, since: float | None = None) -> None:
        """Charge ``job`` while it runs: from ``since`` (its resume), else from its start
        moved later by the time it spent suspended. A suspended job is not charged."""
        if (
            job.state.is_active
            and job.state is not JobState.SUSPENDED
            and job.start_time is not None
            and job.id not in self._running
        ):
            rate = billing_rate(job, self.policy.usage_gpu_weight)
            if since is None:  # from its start, less what it has spent suspended
                since = job.start_time + suspended_seconds(job, self.cluster.clock.now())
            self._running[job.id] = (self.assoc(job), rate, since)

    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        now = self.cluster.clock.now()
        pending: list[Job] = []
        for job in jobs:
            if job.state is JobState.SUSPENDED:
                # its CPUs may be another job's now: what it ran so far is charged, and
                # its clock stops until it resumes
                ran = self._running.pop(job.id, None)
                if ran is not None:
                    self.ledger.record(ran[0], ran[1], ran[2], now)
                    self._paused.add(job.id)
                continue
            if job.state.is_active:
                self._calculated.pop(job.id, None)  # started: out of the queue
                self._track(job, since=now if job.id in self._paused else None)
                self._paused.discard(job.id)
                continue
            self._paused.discard(job.id)
            if job.state is not JobState.PENDING:
                self._calculated.pop(job.id, None)
            charged = self._running.pop(job.id, None)
            if charged is not None:
                assoc, rate, start = charged
                # a requeued run has lost its end time: it ended now
                end = job.end_time if job.end_time is not None else now
                self.ledger.record(assoc, rate, start, end)
            if job.state is JobState.PENDING:
                pending.append(job)
        if pending and self.enabled:
            if any(self.standing.row(*self.assoc(j)) is None for j in pending):
                # an association the standing lacks (a user's first job): one with it,
                # so that its factor and the row ``hal explain`` shows are the same
                waiting = (
                    j for j in self.cluster.unfinished.values() if j.state is JobState.PENDING
                )
                self.standing = self._standing(now, waiting)
            self._assign(pending, now)

    # -- views (read only) ---------------------------------------------------------------
    def calculated(self, job: Job) -> JobPriority:
        """The factors ``job``'s priority was last calculated from (at submit or an
        update of the job, else the last ``calc_period``), with the job as it is now:
        they add up to its priority, as Slurm's sprio shows ``prio_factors``. A job not
        calculated yet (none that is pending should be) gets factors as of now."""
        found = self._calculated.get(job.id)
        if found is None:
            return self.evaluate(job)
        return replace(found, job=job)

    def pending(self, keep: Callable[[Job], bool] | None = None) -> list[JobPriority]:
        """The pending jobs' priorities (``calculated``), by id; ``keep``: only the jobs
        it accepts. Only eligible jobs are listed, as by Slurm's sprio (checked with
        22.05.8, docs/slurm-checks.md): one held ("0 means the job is held": no priority
        to break down until ``scontrol release``), one whose begin time (``--begin``,
        ``StartTime=``) is still ahead and one whose dependency is not met (EligibleTime
        Unknown) are left out."""
        now = self.cluster.clock.now()
        jobs = [
            j
            for j in self.cluster.unfinished.values()
            if j.state is JobState.PENDING
            and not j.held
            and (eligible := j.shown_eligible_time(now)) is not None
            and eligible <= now
            and (keep is None or keep(j))
        ]
        return [self.calculated(j) for j in sorted(jobs, key=lambda j: j.id)]

    def shares(self) -> tuple[ShareRow, ...]:
        """The fair-share standing as of now (usage moves continuously). Computed for
        the answer only: the standing priorities are calculated with changes only at the
        next calculation, so an ``sshare`` never changes what ``sprio`` shows."""
        now = self.cluster.clock.now()
        pending = [j for j in self.cluster.unfinished.values() if j.state is JobState.PENDING]
        return self._standing(now, pending).rows
