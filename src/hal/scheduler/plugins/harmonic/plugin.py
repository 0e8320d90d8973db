"""Place jobs near the running jobs they talk to. See README.md.

The traffic graph (``ClusterSnapshot.traffic``, ``hal.core.traffic``) gives, per workload
identity, the decayed bytes per second to each peer identity. A pending job expects its
identity's share of that traffic (the rate divided among its identity's running jobs)
to each peer identity, spread evenly over that identity's running jobs and their nodes.

PreScore skips a job with nothing to gain: no graph, an identity without peers, no
running job of any peer identity, or less expected traffic than ``min_rate``.

Score, per feasible node ``n``: the expected bytes per second to each peer node ``r``
times the levels ``n`` shares with ``r`` (``levels.Levels``: same node, NVLink domain,
leaf switch and the switches above it, or rack/zone/region/site), i.e. the topology
distance the traffic is spared; divided by the most it could be (all of it on one
node) and scaled to ``[0, MAX_NODE_SCORE]``. So 100 beside all its peers, 0 where its
traffic would cross the core. Vectorised per level: one ``bincount`` of the peers' rows
and one gather over the nodes; the whole-cluster array is kept per identity for the pass
and redone only when a job of a peer identity is placed (Reserve).

Reserve records the placed job where its identity runs (later jobs of the pass see it
as a peer) and, when this plugin's score decided a one-node job's node (the node the
other plugins' scores alone would have chosen is another, farther from its peers),
writes a note for ``hal explain``: the expected bytes per second kept off switches and
where the traffic now turns round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from hal.core.job import Allocation, Job, JobSpec
from hal.core.node import Node
from hal.core.states import JobState
from hal.core.traffic import TrafficView, identity
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    FloatArray,
    IndexArray,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from hal.scheduler.framework.keys import (
    NODE_SCORES,
    add_placement_note,
    drop_placement_note,
)
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SKIP, SUCCESS, Status
from hal.scheduler.plugins.harmonic.levels import Levels
from hal.scheduler.plugins.topology.tree import TreeIndex

NAME = "harmonic"
# Below this (bytes per second expected from one job to all its peers) a job's placement
# is left to the other plugins: a few kB/s are not worth a fuller node elsewhere.
DEFAULT_MIN_RATE = 64 * 1024.0


_UNKNOWN = "\0"  # (no identity: they all have a "/")


@dataclass(slots=True)
class _Where:
    """Where each identity's running jobs are, for one pass: per identity, each job's
    node rows; and a generation per identity, moved on by every change."""

    jobs: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    generation: dict[str, int] = field(default_factory=dict)
    # id(job spec) → its identity, None when the graph has no edge for it: the pass's
    # specs live as long as it (an array's elements share theirs)
    _identities: dict[int, str | None] = field(default_factory=dict)

    def identity_of(self, spec: JobSpec, between: Mapping[str, object]) -> str | None:
        """The identity of a job of ``spec`` if it has peers in the graph, else None."""
        key = id(spec)
        found = self._identities.get(key, _UNKNOWN)
        if found is not _UNKNOWN:
            return found
        me: str | None = identity(spec.user, spec.name, spec.comment)
        if me not in between:
            me = None
        self._identities[key] = me
        return me

    def add(self, ident: str, job_id: int, rows: tuple[int, ...]) -> None:
        self.jobs.setdefault(ident, {})[job_id] = rows
        self.generation[ident] = self.generation.get(ident, 0) + 1

    def remove(self, ident: str, job_id: int) -> None:
        if self.jobs.get(ident, {}).pop(job_id, None) is not None:
            self.generation[ident] = self.generation.get(ident, 0) + 1


@dataclass(frozen=True, slots=True)
class _Peers:
    """A job's identity and its expected traffic: bytes per second to each peer
    identity that has running jobs (by name)."""

    me: str
    rates: tuple[tuple[str, float], ...]


class _Scores(NamedTuple):
    stamp: tuple[tuple[str, int], ...]  # (peer identity, its generation) when made
    whole: FloatArray  # the score of every node row
    rows: list[int]  # the peers' rows
    weights: list[float]  # bytes per second expected to each


# Per pass: the level index of the pass's nodes.
LEVELS: StateKey[Levels] = StateKey("harmonic.levels")
# Per pass: where each identity's running jobs are (grows in Reserve).
WHERE: StateKey[_Where] = StateKey("harmonic.where")
# Per pass, per identity: the score over every node row, the peers' rows and weights it
# was made from, and the peers' generations then (``_Scores``).
BY_IDENTITY: StateKey[dict[str, _Scores]] = StateKey("harmonic.by_identity")
# Per job: its expected traffic (PreScore → Score and Reserve).
PEERS: StateKey[_Peers] = StateKey("harmonic.peers")
# Per job: the scores Score gave every node (Score → Reserve's note).
SCORED: StateKey[_Scores] = StateKey("harmonic.scored")


class HarmonicPlacement:
    name = NAME

    def __init__(self, min_rate: float = DEFAULT_MIN_RATE) -> None:
        self.min_rate = min_rate
        # The level index of the last node list seen, kept across passes and keyed by
        # the nodes' paths (as the topology plugin keeps its tree): the server builds a
        # new node tuple every pass, but the tree rarely changes.
        self._nodes: Sequence[Node] | None = None
        self._key: tuple[tuple[tuple[str, ...], str], ...] | None = None
        self._levels: Levels | None = None

    # -- PreScore ---------------------------------------------------------------------

    def pre_score(
        self, ctx: PassContext, state: CycleState, job: Job, feasible: IndexArray
    ) -> Status:
        view = ctx.snapshot.traffic
        if view is None:
            return SKIP
        where = ctx.data.get(WHERE) or self._where(ctx, view)
        me = where.identity_of(job.spec, view.between)
        if me is None:
            return SKIP
        peers = view.between[me]
        running = where.jobs
        mine = len(running.get(me, ())) or 1  # this job's share of its identity's traffic
        rates = tuple((p, rate / mine) for p, rate in peers.items() if running.get(p))
        if not rates or sum(rate for _, rate in rates) < self.min_rate:
            return SKIP
        state.write(PEERS, _Peers(me, rates))
        return SUCCESS

    # -- Score ------------------------------------------------------------------------

    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        peers = state.get(PEERS)
        view = ctx.snapshot.traffic
        if peers is None or view is None:  # PreScore skips; kept for a direct call
            return np.zeros(len(feasible))
        scores = self._whole(ctx, view, peers)
        state.write(SCORED, scores)
        out: FloatArray = scores.whole[feasible]
        return out

    def _whole(self, ctx: PassContext, view: TrafficView, peers: _Peers) -> _Scores:
        """The score of every node row for ``peers`` (kept for the pass while no job of
        a peer identity is placed)."""
        where = self._where(ctx, view)
        generation = where.generation
        stamp = tuple((p, generation.get(p, 0)) for p, _ in peers.rates)
        cache = ctx.data.get(BY_IDENTITY)
        if cache is None:
            cache = {}
            ctx.data.write(BY_IDENTITY, cache)
        found = cache.get(peers.me)
        if found is not None and found.stamp == stamp:
            return found
        rows, weights = self._peer_rows(where, peers)
        levels = self._levels_for(ctx)
        whole = levels.reach(np.array(rows, dtype=np.intp), np.array(weights))
        best = sum(weights) * levels.count
        if best > 0:
            whole *= MAX_NODE_SCORE / best
        found = cache[peers.me] = _Scores(stamp, whole, rows, weights)
        return found

    @staticmethod
    def _peer_rows(where: _Where, peers: _Peers) -> tuple[list[int], list[float]]:
        """The rows of the peers' running jobs and the bytes per second expected to
        each (a peer identity's rate shared evenly by its jobs, a job's by its nodes)."""
        rows: list[int] = []
        weights: list[float] = []
        for peer, rate in peers.rates:
            jobs = where.jobs[peer]
            per_job = rate / len(jobs)
            for held in jobs.values():
                if held:
                    rows.extend(held)
                    weights.extend([per_job / len(held)] * len(held))
        return rows, weights

    # -- Reserve ----------------------------------------------------------------------

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        view = ctx.snapshot.traffic
        if view is None:
            return SUCCESS
        peers = state.get(PEERS)
        if peers is not None:  # (before the job joins its identity's placements)
            me = peers.me
            note = self._note(ctx, view, state, peers, allocation)
            if note:
                add_placement_note(ctx.data, job.id, note)
            self._where(ctx, view).add(me, job.id, _rows(ctx.nodes.index, allocation))
            return SUCCESS
        where = ctx.data.get(WHERE) or self._where(ctx, view)
        found = where.identity_of(job.spec, view.between)
        if found is not None:  # (no edges: nobody's peer, nobody looks for it)
            where.add(found, job.id, _rows(ctx.nodes.index, allocation))
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        view = ctx.snapshot.traffic
        if view is None:
            return
        spec = job.spec
        where = ctx.data.get(WHERE)
        if where is not None:
            where.remove(identity(spec.user, spec.name, spec.comment), job.id)
        drop_placement_note(ctx.data, job.id)

    def _note(
        self,
        ctx: PassContext,
        view: TrafficView,
        state: CycleState,
        peers: _Peers,
        allocation: Allocation,
    ) -> str:
        """What ``hal explain`` says when this plugin's score moved the job: "" when the
        other plugins' scores alone would have chosen the same nodes, or nodes no
        farther from its peers."""
        scored = state.get(NODE_SCORES)
        # A one-node job's node is the best total score; a multi-node job's set is the
        # topology plugin's (a leaf by best fit), which no score alone decided.
        if scored is None or NAME not in scored[1] or len(allocation.nodes) != 1:
            return ""
        scores = state.get(SCORED)
        if scores is None:
            return ""
        whole = scores.whole
        candidates, parts = scored
        others = [v for k, v in parts.items() if k != NAME]
        if others:  # the node their scores alone pick (argmax: the first best, as the runtime)
            without = others[0] if len(others) == 1 else sum(others[1:], others[0])
            a = int(candidates[int(without.argmax())])
        else:  # no other scorer: the first candidate
            a = int(candidates[0])
        table = ctx.nodes
        c = table.index[allocation.nodes[0]]
        if c == a or whole[c] <= whole[a]:
            return ""
        levels = self._levels_for(ctx)
        kept, near_c, near_a = levels.kept((c, a), scores.rows, scores.weights)
        peer_jobs = _peer_jobs(self._where(ctx, view), peers)
        return (
            f"moved by the traffic graph (harmonic): {_rate(kept)} expected to {peer_jobs} "
            f"kept off switches (on {table.names[c]} it turns round {levels.meeting(near_c)}; "
            f"on {table.names[a]}, where it would have gone without the graph, "
            f"{levels.meeting(near_a)})"
        )

    # -- per pass ---------------------------------------------------------------------

    def _where(self, ctx: PassContext, view: TrafficView) -> _Where:
        """Where the running jobs of every identity with edges are (from the pass's
        running jobs; Reserve adds those placed since)."""
        found = ctx.data.get(WHERE)
        if found is not None:
            return found
        found = _Where()
        known = view.identities
        between = view.between
        index = ctx.nodes.index
        for job in ctx.running:
            if job.state is not JobState.RUNNING or job.allocation is None:
                continue  # a suspended or completing job does not talk
            spec = job.spec
            ident = known.get(job.id) or identity(spec.user, spec.name, spec.comment)
            if ident in between:
                found.jobs.setdefault(ident, {})[job.id] = _rows(index, job.allocation)
        ctx.data.write(WHERE, found)
        return found

    def _levels_for(self, ctx: PassContext) -> Levels:
        found = ctx.data.get(LEVELS)
        if found is not None:
            return found
        nodes = ctx.nodes.nodes
        if self._levels is None or nodes is not self._nodes:
            key = tuple((n.topology, n.nvlink_domain) for n in nodes)
            if self._levels is None or key != self._key:
                self._levels = Levels.of(nodes, TreeIndex.from_nodes(nodes))
                self._key = key
            self._nodes = nodes
        ctx.data.write(LEVELS, self._levels)
        return self._levels


def _rows(index: Mapping[str, int], allocation: Allocation) -> tuple[int, ...]:
    """The node rows of ``allocation`` (nodes that left the cluster left out), without
    numpy: a placement is one node or a few."""
    return tuple(index[n] for n in allocation.nodes if n in index)


def _peer_jobs(where: _Where, peers: _Peers) -> str:
    """``"job 12 (alice/db)"`` or ``"3 jobs of alice/db, bob/cache"``."""
    jobs = [(job_id, peer) for peer, _ in peers.rates for job_id in where.jobs.get(peer, {})]
    if len(jobs) == 1:
        job_id, peer = jobs[0]
        return f"job {job_id} ({peer})"
    names = ", ".join(sorted({peer for _, peer in jobs}))
    return f"{len(jobs)} jobs of {names}"


def _rate(per_second: float) -> str:
    """``12.5 MB/s`` (decimal units, as network rates are given)."""
    value = per_second
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.1f} {unit}/s" if unit != "B" else f"{value:.0f} B/s"
        value /= 1000
    return f"{value:.1f} GB/s"  # (not reached)


def new(args: PluginArgs) -> HarmonicPlacement:
    reject_unknown_args(args, ("min_rate",))
    rate = args.get("min_rate", DEFAULT_MIN_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate >= 0:
        raise PluginArgsError(
            "min_rate", "must be a number of bytes per second >= 0 (0: any traffic counts)"
        )
    return HarmonicPlacement(float(rate))


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_SCORE: type[PreScorePlugin] = HarmonicPlacement
_SCORE: type[ScorePlugin] = HarmonicPlacement
_RESERVE: type[ReservePlugin] = HarmonicPlacement
