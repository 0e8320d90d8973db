"""``MainLoop``: the pass's main loop, every pending job in queue order, placed now or
held back (stage 2 of ``Scheduler.run_pass``; the verdicts are in ``scheduler.py``'s
docstring).

For each job, in order:

* a job a group placement claims (``grouping.py``: a het job's components, a job naming
  several partitions) is decided by its kind, and recorded as any other;
* a job whose queue is blocked runs PreFilter alone (``Framework.pre_filter``: its own
  reason, else the queue's ``Priority``); with ``explain=False`` not even that;
* an array element whose group (``request.element_group``) has a verdict since the last
  cycle that reached Reserve takes it without a cycle (Slurm decides an array's pending
  elements as one record);
* any other job runs its cycle, ``Framework.place(NOW)`` behind the queue gate
  (``gate``).

What it leaves (read by the later stages): the placements, in order, each taken out of
``ctx.nodes`` at once; every job's verdict; the jobs that wait (for pending updates), the
jobs held back for backfill (the gate's, those short of nodes or of a counted resource)
with the stage each stopped at; the terminations.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.grouping import Groupings, GroupPlacement
from hal.scheduler.framework.request import ElementGroup, element_group, placement_key
from hal.scheduler.framework.runtime import FitCache, Framework, Mode, Stage
from hal.scheduler.framework.snapshot import Termination
from hal.scheduler.framework.status import Code, Status, unschedulable

QUEUE = "queue"  # Status.plugin for verdicts the pass itself gives (Priority)
# Stages whose ``Resources`` verdict is a shortage of nodes: the job blocks its partition
# and backfill may reserve for it (Placement: no node set meets a required topology).
_SHORTAGE = (Stage.FILTER, Stage.PLACEMENT)
# Stages a cycle reaches only after Reserve ran (DONE: also a crash anywhere).
_COMMITTING = (Stage.RESERVE, Stage.PERMIT, Stage.DONE)
# Enum members as plain constants for the per-job loop: ``Stage.GATE`` is a lookup
# through the enum class (about 80 ns on Python 3.11), a dozen of them per job.
_GATE, _PRE_FILTER, _FILTER, _DONE = Stage.GATE, Stage.PRE_FILTER, Stage.FILTER, Stage.DONE
_NOW = Mode.NOW
# (a Status only as a marker, compared by identity: no verdict kept for the group)
_UNKNOWN = Status(Code.ERROR, message="no verdict kept")
_SUCCESS, _UNSCHEDULABLE = Code.SUCCESS, Code.UNSCHEDULABLE
_RESOURCES = PendingReason.RESOURCES
# Reasons a job after a pass's stop is still looked at for (``notice_eligible``): it
# waits for its begin time or for other jobs, and may have become eligible.
_WAITS = frozenset(
    {PendingReason.BEGIN_TIME, PendingReason.DEPENDENCY, PendingReason.JOB_ARRAY_TASK_LIMIT}
)
_UNJUDGED = PendingReason.WAITING_FOR_SCHEDULING
# The verdict of an eligible job after the stop: no placement was tried (Slurm's
# WAIT_NO_REASON, "None", which its build_job_queue gives a job found independent).
_ELIGIBLE = unschedulable(PendingReason.NONE, "eligible: not looked at by this pass", QUEUE)


def _capped(partition: str, max_starts: int) -> Status:
    """The verdict of a job passed over at its partition's cap and handed to backfill."""
    message = f"partition {partition} placed max_job_starts ({max_starts}) jobs this pass"
    return unschedulable(PendingReason.PRIORITY, message, QUEUE)


# The queue a job waits in: its partition, and the advance reservation it runs in (None
# for most). A reservation's jobs run only on its nodes, which no other job may use
# meanwhile, so they neither wait behind the partition's blocked head nor block it.
Queue = tuple[str, str | None]


class MainLoop:
    """One pass's main loop over ``ctx`` (``run``), and what it decided."""

    def __init__(
        self, framework: Framework, ctx: PassContext, groupings: Groupings, *, explain: bool
    ) -> None:
        self.framework = framework
        self.ctx = ctx
        self.groupings = groupings
        self.explain = explain
        # queue → the verdict of every later job there (Priority, naming the blocker)
        self.blocked: dict[Queue, Status] = {}
        # placement key → its Filter failure (valid all loop: resources only shrink)
        self.fit_cache: FitCache = {}
        # array elements: the group's PreFilter verdict (None: passed) since the last
        # cycle that reached Reserve
        self.verdicts: dict[ElementGroup, Status | None] = {}
        self.placed: list[tuple[Job, Allocation]] = []
        self.waiting: list[Job] = []
        self.held: list[Job] = []  # held back for backfill, not by their own reasons
        self.held_stages: list[Stage] = []  # where each of ``held`` stopped
        self.terminations: list[Termination] = []
        self.statuses: dict[int, Status] = {}
        profile = framework.profile
        self._backfill = profile.backfill
        self._counted = profile.counted
        # (CountedResource plugin, counter) → the first job handed to backfill that holds
        # it (None: no backfill or no such plugin). While it is empty the gate is the
        # queue's alone, so passes without counters handed over pay nothing for it.
        self._ahead: dict[tuple[str, str], Job] | None = (
            {} if self._backfill is not None and self._counted else None
        )
        self._planned: dict[str, bool] = {}  # partition → has a backfill policy
        self._reasons = tuple(each.reason for each in self._counted)  # their shortages
        # partition → the verdict of its jobs handed to backfill once it reached the
        # pass's most starts (``run``'s ``max_starts``): the partitions it passed over
        self.capped: dict[str, Status] = {}
        # partition → that verdict, from its ``max_starts``-th placement on: ``gate``
        # keeps a group placement (a het job, a job naming several partitions) out of it
        self._full: dict[str, Status] = {}
        self._to_hand: dict[str, int] = {}  # partition → jobs still to hand over

    def run(
        self,
        queue: Sequence[Job],
        *,
        depth: int | None = None,
        max_starts: int | None = None,
        hand_over: bool = False,
    ) -> bool:
        """Decide the jobs of ``queue`` in queue order: every one, or the first ``depth``
        (Slurm's default_queue_depth); a partition's jobs are passed over once
        ``max_starts`` of that partition's are placed (sched_max_job_start, per partition:
        one partition's backlog never keeps another's jobs from their nodes; a het job or
        a job naming several partitions is decided as ever, kept out of those partitions
        by ``gate``: the latter may start in another). True when every job was decided;
        the jobs after a stop, or passed over, are not looked at (no verdict: they keep
        what the store has). This runs for every pending job of
        every pass: what it reads is in locals, the common paths inline.

        ``hand_over`` (a pass whose backfill stage runs although it stopped at the cap:
        backfill's turn, ADR 0029): the first jobs passed over in each partition,
        ``min(max_job_test or ∞, max_starts)`` of them (its backfill policy's; 0: all)
        less the jobs of it already held back, are handed to backfill (``_hand_over``)
        rather than left undecided; ``capped`` names the partitions."""
        framework, ctx = self.framework, self.ctx
        gate = self.gate
        blocked, statuses, verdicts, fit_cache = (
            self.blocked,
            self.statuses,
            self.verdicts,
            self.fit_cache,
        )
        placed, waiting, held, held_stages = self.placed, self.waiting, self.held, self.held_stages
        not_placed = self._not_placed
        claimed = self.groupings.claimed(queue)  # job id → its group placement (most: none)
        explain = self.explain
        # A PostFilter plugin may change what PreFilter reads, so profiles with one
        # decide every array element on its own.
        grouping = not framework.profile.post_filter
        # (a stop is looked for only when one is set: most passes have none)
        stop = depth is not None or max_starts is not None
        looked, most = 0, len(queue) if depth is None else depth
        starts: Counter[str] = Counter()  # placements by partition (``max_starts``)
        counted = 0  # (``placed`` is counted into ``starts`` up to here)
        passed_over: list[Job] = []
        capped, full, to_hand = self.capped, self._full, self._to_hand
        for job in queue:
            if stop:
                if looked >= most:
                    self.notice_eligible([*passed_over, *queue[looked:]])
                    return False
                looked += 1
                if max_starts is not None:
                    if len(placed) > counted:  # (no slice a job while nothing is placed)
                        for each, _ in placed[counted:]:
                            name = each.partition
                            starts[name] += 1
                            if starts[name] >= max_starts and name not in full:
                                full[name] = _capped(name, max_starts)
                        counted = len(placed)
                    # (a group placement's job is decided: ``gate`` keeps it out of a
                    # partition at its cap, not out of its others)
                    if job.partition in full and not (claimed and job.id in claimed):
                        if job.partition not in capped:
                            capped[job.partition] = full[job.partition]
                        if (
                            hand_over
                            and to_hand.get(job.partition, 1) > 0  # (1: not yet asked)
                            and self._hand_over(job, max_starts)
                        ):
                            continue
                        passed_over.append(job)
                        continue
            if claimed and job.id in claimed:
                self._decide_grouped(claimed[job.id], job)
                continue
            gated = blocked.get((job.partition, job.spec.reservation))  # the queue's gate
            if gated is not None and not explain:
                statuses[job.id] = gated
                held.append(job)
                held_stages.append(_GATE)
                waiting.append(job)
                continue
            # (element_group is None for a job that is no array element: asked only then)
            group = element_group(job) if grouping and job.array_job_id is not None else None
            known = verdicts.get(group, _UNKNOWN) if group is not None else _UNKNOWN
            out = None
            if known is not _UNKNOWN:
                # an earlier element's verdict, still valid (nothing placed since)
                if known is not None:
                    st, stage = known, _PRE_FILTER
                elif gated is not None:
                    st, stage = gated, _GATE
                else:
                    failed = fit_cache.get(placement_key(job))
                    if failed is not None:
                        st, stage = failed, _FILTER
                    else:
                        out = framework.place(ctx, job, _NOW, gate=gate, fit_cache=fit_cache)
            elif gated is not None:
                # behind the queue whatever Filter says: only its own reason is wanted
                own = framework.pre_filter(ctx, job)
                if own is None:
                    if group is not None:
                        verdicts[group] = None
                    # held back by the queue (``_not_placed``'s gate case, inline)
                    statuses[job.id] = gated
                    held.append(job)
                    held_stages.append(_GATE)
                    waiting.append(job)
                    continue
                st, stage = own.status, own.stage
                if group is not None and stage is not _DONE:
                    verdicts[group] = st if stage is _PRE_FILTER else None
            else:
                out = framework.place(ctx, job, _NOW, gate=gate, fit_cache=fit_cache)
            if out is not None:
                st, stage = out.status, out.stage
                if stage in _COMMITTING:
                    verdicts.clear()  # Reserve ran: what PreFilter reads may have changed
                    if st.code is _SUCCESS and out.allocation is not None:
                        statuses[job.id] = st
                        placed.append((job, out.allocation))
                        continue
                elif group is not None:
                    verdicts[group] = st if stage is _PRE_FILTER else None
            statuses[job.id] = st
            if not_placed(job, st, stage):
                self._hand_over_counters(job)
        if passed_over:
            self.notice_eligible(passed_over)
        return not capped  # (jobs passed over at the cap, handed to backfill or not)

    def _hand_over(self, job: Job, max_starts: int) -> bool:
        """``job``, passed over at its partition's cap in backfill's turn: handed to
        backfill (True) while its partition's policy tests more, as a job behind a
        blocked queue is (its own PreFilter verdict, else the cap's ``Priority``), so
        the stage plans it after the jobs placed, ahead of the later ones. A job of a
        partition without a policy is left passed over.
        Only a job handed over counts against the policy's budget (one with a verdict of
        its own, held or waiting for other jobs, is never tested by backfill)."""
        partition = job.partition
        left = self._to_hand.get(partition)
        if left is None:
            left = 0
            policy = self._backfill.policy_for(partition) if self._backfill is not None else None
            if policy is not None:
                # (0: every job; never more than the pass started: a turn costs at most
                # twice the cycles of a pass that stopped at the cap)
                left = min(policy.max_job_test or sys.maxsize, max_starts)
                left -= sum(1 for each in self.held if each.partition == partition)
        if left <= 0:
            self._to_hand[partition] = left
            return False
        own = self.framework.pre_filter(self.ctx, job)
        if own is None:
            self.statuses[job.id] = self.capped[partition]
            self.held.append(job)
            self.held_stages.append(_GATE)
            self.waiting.append(job)
            self._to_hand[partition] = left - 1
            return True
        self.statuses[job.id] = own.status
        held = len(self.held)
        if self._not_placed(job, own.status, own.stage):
            self._hand_over_counters(job)
        # (handed over for its own shortage of a counted resource: it is tested too)
        self._to_hand[partition] = left - (len(self.held) - held)
        return True

    def notice_eligible(self, rest: Sequence[Job]) -> None:
        """The jobs of ``rest`` (after the stop) that wait for their begin time or for
        other jobs (a dependency, an array's throttle; or a dependency not judged yet):
        each gets its PreFilter's own verdict, or ``None`` when it is eligible now. Slurm's
        build_job_queue runs its begin and dependency tests on every pending job each
        pass; only the placement tests stop at the depth. So the pass that finds a
        dependency met records it (the plan applier's eligible_time: sacct's Eligible,
        the priority's age), not the next full pass, up to sched_interval later."""
        pre_filter, ctx = self.framework.pre_filter, self.ctx
        for job in rest:
            reason = job.reason
            if reason not in _WAITS and (reason is not _UNJUDGED or job.spec.dependency is None):
                continue
            own = pre_filter(ctx, job)
            st = _ELIGIBLE if own is None else own.status
            self.statuses[job.id] = st
            if st.terminal_state is not None:
                self.terminations.append(Termination(job.id, st.terminal_state, st.reason))
            else:
                self.waiting.append(job)

    def gate(self, job: Job) -> Status | None:
        """The verdict of a job behind its blocked queue (``Priority``), of one in a
        partition that placed the pass's most starts (``Priority``: a het job's
        component, a job naming several partitions tried there), or behind a job handed
        to backfill that waits for a counter this one asks too (the counted resource's
        reason); None to go on. Runs after PreFilter, in ``place``."""
        found = self.blocked.get((job.partition, job.spec.reservation))
        if found is None and self._full:  # (a group placement's job: the others are
            found = self._full.get(job.partition)  # passed over before they get here)
        if found is not None or not self._ahead:
            return found
        for each in self._counted:
            asked = each.counts(job)
            if not asked or not self._backfilled(job.partition):
                continue
            for name, _ in asked:
                first = self._ahead.get((each.name, name))
                if first is not None:
                    message = f"{name}: job {first.id} ahead in the queue waits for it"
                    return unschedulable(each.reason, message, QUEUE)
        return None

    def _decide_grouped(self, kind: GroupPlacement, job: Job) -> None:
        """``job``, decided by its group placement, recorded as any job's verdict is."""
        decided = kind.decide(self.framework, self.ctx, job, self.gate, self.fit_cache)
        if decided.ran:
            self.verdicts.clear()  # Reserve may have run (and been undone)
        self.placed.extend(decided.placed)
        job, st = decided.job, decided.status
        self.statuses[job.id] = st
        if st.code is _SUCCESS:
            return
        for partition in decided.short:  # it holds back each partition it waits in
            self._block(job, partition, decided.name)
        held = len(self.held)
        if self._not_placed(job, st, decided.stage, decided.name):
            self._hand_over_counters(job)
        if len(self.held) > held:
            self.groupings.note_held(kind)  # its kind plans it in backfill

    def _not_placed(self, job: Job, st: Status, stage: Stage, name: str = "") -> bool:
        """A job this pass did not place: ended (a terminal verdict) or waiting. A job
        the queue holds back (gate), short of nodes or short of a counted resource also
        goes to backfill; a shortage of nodes also blocks its queue for every later job
        (``name``: how the job is named there; "": its id). True when a job holding
        counters went to backfill for its own shortage (not the gate's): later jobs
        asking the same counters are then left to backfill too."""
        if st.terminal_state is not None:
            self.terminations.append(Termination(job.id, st.terminal_state, st.reason))
        else:
            self.waiting.append(job)
        if st.code is not _UNSCHEDULABLE:
            return False
        if stage is _PRE_FILTER:
            # (a loop, not ``any``: most jobs of a busy pass come here, most passes have
            # no counted resource)
            for reason in self._reasons:
                if st.reason is reason:
                    self.held.append(job)  # its counters are planned over time
                    self.held_stages.append(stage)
                    return True
            return False
        if stage is _GATE or (stage in _SHORTAGE and st.reason is _RESOURCES):
            self.held.append(job)
            self.held_stages.append(stage)
            if stage is _GATE:
                return False
            self._block(job, job.partition, name)
            return bool(self._counted) and any(each.counts(job) for each in self._counted)
        return False

    def _block(self, job: Job, partition: str, name: str = "") -> None:
        """``job`` is short of nodes in ``partition``: every later job of that queue
        waits behind it (the first such job names the reason)."""
        queue = (partition, job.spec.reservation)
        if queue not in self.blocked:
            self.blocked[queue] = unschedulable(
                PendingReason.PRIORITY,
                f"job {name or job.id} is ahead in partition {partition}",
                QUEUE,
            )

    def _hand_over_counters(self, job: Job) -> None:
        """``job`` (holding counters) was handed to backfill: its counters now go to
        later jobs only through backfill (``gate``)."""
        ahead = self._ahead
        if ahead is None or not self._backfilled(job.partition):
            return
        for each in self._counted:
            for name, _ in each.counts(job):
                ahead.setdefault((each.name, name), job)

    def _backfilled(self, partition: str) -> bool:
        found = self._planned.get(partition)
        if found is None:
            assert self._backfill is not None
            found = self._planned[partition] = self._backfill.policy_for(partition) is not None
        return found
