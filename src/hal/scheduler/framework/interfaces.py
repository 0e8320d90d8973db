"""The extension points. Each is a Protocol; a plugin is any object with a ``name`` and
the methods of the points it serves, registered under that name (see ``profile``).

One job's cycle, in order (the runtime is ``runtime.Framework``)::

    QueueSort ─ orders the pending jobs once per pass
    PreFilter ─ job-level verdicts (hold, dependency, partition limits) + precompute
    [queue gate: a Resources-blocked partition gives later jobs there reason Priority]
    Filter    ─ vectorised: which nodes could take the job, for a given node count
    PostFilter─ only when Filter left too few nodes (preemption goes here)
    PreScore  ─ precompute for Score over the feasible nodes
    Score     ─ vectorised: rank feasible nodes (+ optional normalisation), weighted sum
                (a WeightedScorer gives its scores already weighted)
    Placement ─ multi-node jobs: PlacementGenerate picks the node set as a whole
                (e.g. under one switch), PlacementScore ranks candidate sets
    Reserve   ─ the job has nodes: plugins record it in their pass-wide state
    Permit    ─ last say: allow, reject, or WAIT (gangs) — Unreserve undoes Reserve
    (commit   ─ the runtime takes the allocation out of the NodeTable)

After the main loop, once per pass, the Backfill point (at most one plugin) says per
partition how to plan the jobs the main loop held back, and how long jobs are expected
to run; the framework's backfill stage (``framework/backfill.py``) does the planning and
sends each job through the same cycle as above.

Counters a job holds on no node (licenses) are a CountedResource plugin's: it judges
them in its own PreFilter, and tells the framework what each job holds, so that the
pass holds later jobs back behind one short of them and backfill plans them over time
as it plans nodes. The keys plugins and framework pass each other are in ``keys.py``.

Rules for every point:

* Return values, never raise, to say "no". A raise is a bug; it fails that job's cycle
  with ``Code.ERROR`` and the pass goes on.
* Read the clock only as ``ctx.now``; break ties by job id and node order. Same inputs,
  same answer.
* Per-job scratch goes in the ``CycleState`` given to the call; things that accumulate
  over a pass go in ``ctx.data`` (and must be updated only in Reserve/Unreserve so that
  test-only and will-run runs leave no trace).
* Do not mutate the ``NodeTable``'s arrays; the runtime owns its accounting.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import Counts
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.node_table import BoolArray
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import Status

FloatArray = npt.NDArray[np.float64]
IndexArray = npt.NDArray[np.intp]

MAX_NODE_SCORE = 100.0  # every Score plugin's output ends up in [0, MAX_NODE_SCORE]


@runtime_checkable
class Plugin(Protocol):
    @property
    def name(self) -> str:
        """The registry name; also what Status.plugin and diagnostics report."""
        ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def sort_key(self, job: Job) -> Any:
        """A key ordering pending jobs, first to be scheduled first.

        Called once per pending job per pass (a key, not a pairwise ``less``, so 50,000
        jobs sort in C). The runtime appends ``job.id`` so equal keys stay deterministic.
        Exactly one QueueSort plugin is enabled per profile.
        """
        ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        """Decide what can be decided for the job as a whole, and precompute for Filter.

        Called once per job per pass, in profile order, before the queue gate (for a
        job behind a blocked queue, not when ``PreFilterWaiver.lets_through`` says the
        plugin lets the job through). Returns:
        SUCCESS to go on; SKIP if this plugin's Filter has nothing to check for this job;
        UNSCHEDULABLE with the pending reason (the job waits, and does *not* hold back
        jobs behind it); UNRESOLVABLE when waiting cannot help (set ``terminal_state`` to
        ask for the job to be ended, e.g. ``--kill-on-invalid-dep``). May write
        ``state``; must not write ``ctx.data`` except for caches keyed by what they read.

        The elements of one array that ``request.element_group`` puts together get one
        verdict: the main pass asks about the first and gives the others its answer
        until some job is placed (only Reserve changes ``ctx.data``). So the verdict
        must not depend on the element's job id or task id (jobs with a dependency,
        which ``aftercorr`` may pair by index, are never grouped).
        """
        ...


@runtime_checkable
class PreFilterWaiver(Protocol):
    def lets_through(self, job: Job) -> bool:
        """True when this plugin's PreFilter answers SUCCESS or SKIP for ``job`` whatever
        else the pass holds (its clock, running jobs, partitions, nodes), judged from the
        job alone; False when it may reject the job, or cannot tell without the pass.

        Optional, beside PreFilter. For a job behind a blocked queue only a rejection
        matters (its own reason), so the main pass leaves out the plugins that let the
        job through. The answer is kept from pass to pass while the job's spec (the same
        object), partition, admin hold, array id and array throttle stay as they were, so
        it must read nothing else.
        """
        ...


class FilterResult(NamedTuple):
    """Which nodes pass this filter, and the reason to give if too few do. (A named
    tuple: one is made per Filter call, and a frozen dataclass costs twice as much.)"""

    feasible: BoolArray
    reason: PendingReason = PendingReason.RESOURCES
    message: str = ""


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        """A boolean mask over all nodes (``len(ctx.nodes)``): True where the job could
        run with ``request`` (its per-node need for ``request.n_nodes`` nodes).

        The runtime ANDs the masks of all Filter plugins; when fewer than
        ``request.n_nodes`` nodes survive, the reason of the filter that made the
        count fall short is the job's reason. A returned array may be shared (the
        runtime never writes it). Must be a pure function of the job's
        ``placement_key`` and the table: the pass reuses a failed fit for every job with
        the same key; a plugin whose mask for a job also read something else (its user)
        writes ``keys.JOB_BOUND`` to the job's state where that took nodes away.
        """
        ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(self, ctx: PassContext, state: CycleState, job: Job, failed: Status) -> Status:
        """Called when Filter left too few nodes, in the main pass only (NOW mode, not
        test-only, will-run or backfill), with ``state[keys.FITS]`` set. SUCCESS means the
        plugin made room in ``ctx.nodes`` and the runtime runs Filter once more. An
        UNSCHEDULABLE verdict with reason ``Resources`` replaces ``failed`` (the job
        still blocks its partition, e.g. "preempting jobs 4, 7"); any other rejection
        also replaces it. The preemption plugin nominates victims in ``ctx.data[
        keys.PREEMPTIONS]`` (the one write outside Reserve this point may make: it runs only
        when the pass is for real)."""
        ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(
        self, ctx: PassContext, state: CycleState, job: Job, feasible: IndexArray
    ) -> Status:
        """Precompute for Score over ``feasible`` (node rows). SKIP drops this plugin's
        Score for the job; a rejection fails the cycle."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        """One score per row of ``feasible``, higher is better, in
        ``[0, MAX_NODE_SCORE]`` unless the plugin also implements ``ScoreNormalizer``.
        The runtime multiplies by the profile weight, sums over plugins and picks the
        best nodes; ties go to the lower node row."""
        ...


@runtime_checkable
class ScoreNormalizer(Protocol):
    def normalize_scores(self, scores: FloatArray) -> FloatArray:
        """Map the plugin's raw scores into ``[0, MAX_NODE_SCORE]``."""
        ...


@runtime_checkable
class WeightedScorer(Protocol):
    def weighted_score(
        self,
        weight: float,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray | None:
        """``score(...) * weight``, bit for bit (a new array, or 0-d: below), for a
        Score plugin that keeps its scores weighted too: the runtime calls it instead
        of ``score``, and does not multiply (a numpy call less per job scored). None:
        no opinion on this job (as a PreScore's SKIP: nothing added, not in
        ``keys.NODE_SCORES``), so that such a plugin needs no PreScore call per job. A
        0-d array: the same score on every candidate (added to each; no gather; it may
        be the plugin's own, kept read-only). Only a ``WeightedScorer`` may say None or
        give a 0-d array: from another Score plugin the runtime raises. Not used with
        ``ScoreNormalizer``."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        """The job got ``allocation`` in this pass (NOW mode only). Record it in
        ``ctx.data`` (e.g. one more running element of this array). A rejection undoes
        the placement; ``unreserve`` is then called on every plugin already reserved."""
        ...

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        """Undo ``reserve`` exactly. Idempotent; must not fail."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        """Last say before the placement is committed: SUCCESS, a rejection, or WAIT
        (hold the placement until a condition holds, e.g. a whole gang is placed). This
        version of the runtime treats WAIT as "not this pass" and unreserves."""
        ...


@runtime_checkable
class PlacementGeneratePlugin(Plugin, Protocol):
    def generate(
        self, ctx: PassContext, state: CycleState, job: Job, ranked: IndexArray, count: int
    ) -> Sequence[IndexArray] | Status:
        """Choose the job's nodes as a whole (e.g. all under one switch), after Score.

        Called only for jobs that need ``count >= 2`` nodes and name no ``--nodelist``,
        with ``ranked``: the feasible rows in node-score order, best first, so a plugin
        honours the node preferences by taking a domain's rows in that order. At most
        one PlacementGenerate plugin per profile. Returns:

        * candidate node sets, best first, each exactly ``count`` distinct rows of
          ``ranked``: the runtime takes the first, or with PlacementScore plugins the
          best-scoring (ties to the earlier one);
        * SKIP or no sets: no opinion, the runtime takes the top ``count`` rows;
        * UNSCHEDULABLE: no acceptable set now; the cycle stops at ``Stage.PLACEMENT``.
          Reason ``Resources`` is treated like a Filter shortage (the partition is
          blocked behind the job, and backfill may reserve for it); any other reason is
          the job's own wait and holds nobody back;
        * UNRESOLVABLE: no set could ever be acceptable.

        Must be a pure function of the table, the job and ``ctx.now``; like Filter it
        may write ``ctx.data`` only for caches keyed by what they read.
        """
        ...


@runtime_checkable
class PlacementScorePlugin(Plugin, Protocol):
    def score_placement(
        self, ctx: PassContext, state: CycleState, job: Job, nodes: IndexArray
    ) -> float:
        """Score one candidate node set from PlacementGenerate, higher is better. Called
        only when PlacementGenerate returned more than one set; the scores of all
        PlacementScore plugins are summed."""
        ...


class BackfillMode(StrEnum):
    # One reservation per partition (the first job held back); every other job may start
    # now only if it delays nobody's reservation (Lifka's EASY, Slurm with bf_max_job_test
    # reservations limited to one).
    EASY = "easy"
    # Every job held back gets a reservation in priority order; a job may start now only
    # if it delays no earlier job's reservation (Mu'alem and Feitelson's conservative).
    CONSERVATIVE = "conservative"


@dataclass(frozen=True, slots=True)
class BackfillPolicy:
    """How one partition is backfilled. The tunables follow Slurm's ``SchedulerParameters``.

    ``window_s`` (bf_window): plan this far ahead; 0 = no limit. ``resolution_s``
    (bf_resolution): planned times are rounded up to it, so fewer distinct instants exist.
    ``max_job_test`` (bf_max_job_test): at most this many held-back jobs are planned per
    pass, in order; 0 = all. ``interval_s`` (bf_interval): how often the caller should run
    the stage (``Scheduler.backfill_interval_s``); the pure pass itself keeps no time.
    ``yield_interval_s`` (bf_yield_interval): the caller works the forecast out in slices
    of about this long, one per cycle (``PacedScheduler.forecast``); 0 = whole.
    ``shortest_first``: after the reservations, try candidates by shortest expected run
    time instead of priority (EASY-SJBF). ``protect_after_s``: once the partition's first
    held-back job has waited this long, a job backfilled now is planned to hold its nodes
    until its time limit, not its predicted end, so that no under-prediction can delay
    that job any further (predictions shorter than the truth let a stream of backfilled
    jobs overrun a wide job's reservation again and again); 0 = never.
    """

    mode: BackfillMode = BackfillMode.EASY
    window_s: float = 86_400.0
    resolution_s: float = 60.0
    max_job_test: int = 500
    interval_s: float = 30.0
    yield_interval_s: float = 0.0
    shortest_first: bool = False
    protect_after_s: float = 0.0


@runtime_checkable
class BackfillPlugin(Plugin, Protocol):
    @property
    def interval_s(self) -> float:
        """bf_interval: the least time between two backfill runs the caller should keep
        (0 = every pass). The server's shell and the simulator read it."""
        ...

    @property
    def yield_interval_s(self) -> float:
        """bf_yield_interval: how long one slice of the forecast of expected starts may
        take (0 = the whole forecast at once); the server's shell reads it."""
        ...

    def policy_for(self, partition: str) -> BackfillPolicy | None:
        """The partition's backfill policy, or None to leave it strictly in priority
        order. Called once per partition per pass; must be pure."""
        ...

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Called once per backfill stage, before any ``runtime`` call, with every job
        the stage may plan (running and held back): a chance to predict them all in one
        batch. May do nothing."""
        ...

    def runtime(self, job: Job, elapsed_s: float = 0.0) -> float:
        """Seconds ``job`` is expected to run from its start (> 0, at most its time limit
        when it has one), for planning only: nobody is killed at this time. Called for
        every running job (with the seconds it has run so far, so that a job that outlived
        its prediction is planned to end later) and every planned pending job of a pass;
        must be cheap."""
        ...

    def fixed_runtimes(self, jobs: Sequence[Job]) -> FloatArray | None:
        """``runtime(job)`` for each of ``jobs`` (pending: nothing elapsed) at once, when
        the answers do not depend on when or in what order they are asked (the requested
        time); else None, and the stage asks ``runtime`` job by job, as it would have."""
        ...


class BackfillPlanning(Protocol):
    """Optional on a ``BackfillPlugin`` (a plugin without it is a backfill plugin all
    the same, its stage held around nothing):"""

    def planning(self) -> AbstractContextManager[object]:
        """Held around one backfill stage of a pass (its ``prepare`` and every
        ``runtime`` call): a predictor other threads learn with is held for the stage,
        so that the stage plans with one state of it (``prepare``'s batch not made stale
        by a job that ended meanwhile) and no ``runtime`` call waits for it again. The
        wait to take it is the stage's ``lock_s``. May hold nothing."""
        ...


@runtime_checkable
class CountedResourcePlugin(Plugin, Protocol):
    """Counters a job holds cluster-wide while it runs, on no node (licenses: ``-L
    matlab:2`` against ``[licenses] matlab = 10``). Neither the ``NodeTable`` nor the
    ``AvailabilityProfile`` sees them, so the plugin judges them in its own PreFilter
    (also a point it serves) and keeps what this pass holds in Reserve/Unreserve. What
    the framework does with this point:

    * **main pass**: a job whose PreFilter verdict is UNSCHEDULABLE with ``reason``
      goes to backfill (planned for when its counters are back), and so does a job
      short of nodes that holds some. Every later job of a backfilled partition that
      asks one of the counters such a job asks is then held back too (the gate gives it
      ``reason``, plugin ``queue``), for backfill to start only if it delays no
      reservation: otherwise later jobs would take the counters as they free up, and a
      job asking many might never find them free at once (Slurm's ``bf_licenses``).
    * **backfill**: once the stage plans a job holding counters, it builds a
      ``CountsOverTime`` per plugin (``ctx.data[keys.COUNTS_OVER_TIME][name]``): the
      running jobs' ``counts`` until their planned ends, and each job the stage starts
      or reserves from its start to its planned end. While it tries a run
      (``keys.PLAN_START`` or ``ctx.now``, to ``keys.PLAN_END``), the plugin's PreFilter
      judges that whole run against it; a shortage names in ``earliest_start`` the
      first instant from which the counters are free for the run (for a run planned
      later than now), and the search for a reservation goes on from there.
    """

    @property
    def reason(self) -> PendingReason:
        """The pending reason of a job short of these counters (``Licenses``)."""
        ...

    def counts(self, job: Job) -> Counts:
        """What ``job`` holds while it runs: (counter, count) pairs, () for none. Asked
        for jobs the pass hands to backfill, the jobs behind them, and every job the
        backfill stage plans (running ones too): pure and cheap."""
        ...
