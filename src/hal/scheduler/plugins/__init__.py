"""The scheduler's plugins, one package each, and the default wiring.

Plugins import only ``hal.scheduler.framework`` and ``hal.core``. This package is also
where the registry of built-in plugins and the ``build_scheduler`` factory live: the
framework may not import plugins, so the place that knows them all is here.

The default profile, in call order (PreFilter runs in this order, so the reason a user
sees is that of the first plugin that objects)::

    priority       QueueSort  priority desc, submit time, id
    hold           PreFilter  JobHeldAdmin / JobHeldUser / BeginTime
    partition      PreFilter  PartitionDown / PartitionInactive / PartitionTimeLimit /
                              PartitionNodeLimit
                   Filter     the partition's nodes
    dependency     PreFilter  Dependency / DependencyNeverSatisfied (+ Termination)
                   Reserve    singleton bookkeeping
    arraythrottle  PreFilter  JobArrayTaskLimit;  Reserve: count placed elements
    reservation    PreFilter  Reservation (--reservation: unknown, not allowed, not started)
                   Filter     reservation jobs on its free nodes; others off nodes whose
                              reservation window meets their run → Resources /
                              ReqNodeNotAvail, Reserved for maintenance
    limits         PreFilter  QOSMaxJobsPerUserLimit, AssocGrpGRES, ... (QoS and account
                              limits); Reserve: count placed jobs. Only when some limit
                              is configured: ``default_profile(limits=True)``
    noderesources  PreFilter  BadConstraints / ReqNodeNotAvail (static mask per key)
                   Filter     cpus, memory, gpus, exclusive → Resources
                   Score      best fit
    exclusiveuser  PreFilter  SKIP unless the job or a job holding a node has --exclusive=user
                   Filter     --exclusive=user: off nodes other users' jobs hold, and
                              every job off nodes other users' such jobs hold → Resources
                   Reserve    who holds each node, for the next job of the pass

    nvlink         PreFilter  BadConstraints (no NVLink island as large as the GPUs per node)
                   Filter     --topology required=nvlink: a free island that holds them
                   (jobs without that requirement skip both)
                   Score      other GPU jobs: nodes that can give one island (weight 2,
                              above any best-fit difference; never a reason to wait)
    affinity       PreFilter  Affinity (a --near target not running yet) / BadConstraints
                   Filter     required --near/--apart rules, and required --apart rules of
                              jobs holding nodes that name this one → Affinity
                   Score      preferred --near/--apart rules (weight 3)
                   Reserve    placed jobs become targets for the next (SKIP for jobs
                              without rules while nobody holds a required --apart)
    topology       PreFilter  BadConstraints (unknown or too small --topology level)
                   Placement  multi-node jobs: one leaf switch, else fewest leaves
                              under the lowest switch; Topology (--switches wait)
                   (only when the cluster has a topology: ``default_profile(topology=...)``)
    datalocality   Score      nodes whose leaf cache holds the job's --data inputs, or can
                              get them fastest and cheapest (``hal.core.data``)
                   (only when a data plane is configured: ``default_profile(data=True)``)
    harmonic       Score      nodes near the running jobs the job's workload talks to
                              (the traffic graph, ``hal.core.traffic``); SKIP without
                              a graph or peers. Reserve: where each workload runs, and
                              the note ``hal explain`` shows when it moved a job
    dissonance     Score      nodes where the job's class clashes least with its
                              neighbours' (the interference model, ``hal.core.
                              dissonance``; latency-sensitive neighbours first); SKIP
                              without a model or a class. Reserve: who holds each node,
                              and the note ``hal explain`` shows when a neighbour moved it
    preemption     PostFilter a job that does not fit chooses lower-standing running
                              jobs to requeue, cancel or suspend (only with [preemption]:
                              ``default_profile(preemption=True)``)
    backfill       Backfill   EASY with Slurm's defaults (bf_window 1 day, bf_resolution
                              60 s, bf_max_job_test 500, bf_interval 30 s): Slurm's
                              default scheduler is sched/backfill. It starts held-back
                              jobs that delay no reservation and gives the first blocked
                              job of each partition its expected start (``squeue
                              --start``). ``default_profile(backfill=False)``: strict
                              priority order (FCFS), no expected starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hal.core.node import Partition
from hal.core.preemption import PreemptionPolicy
from hal.core.priority import PriorityPolicy
from hal.core.topology import Topology
from hal.predict import Predictor
from hal.scheduler.framework.profile import PluginArgs, Registry, build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import (
    affinity,
    arraythrottle,
    backfill,
    datalocality,
    dependency,
    dissonance,
    exclusiveuser,
    harmonic,
    hold,
    limits,
    noderesources,
    partition,
    preemption,
    priority,
)
from hal.scheduler.plugins import licenses as licenses_plugin
from hal.scheduler.plugins import reservation as reservation_plugin
from hal.scheduler.plugins import topology as topology_plugin
from hal.scheduler.plugins.noderesources import islands as nvlink

BACKFILL = backfill.NAME
# Locality outweighs best fit: moving a dataset costs more than a fragmented node.
DATA_WEIGHT = 2.0
# A data job waits up to this long for a node whose cache holds more of its inputs than the
# free ones (hal bench data: 3.2-3.6x fewer bytes moved than placement without locality,
# against 1.8-2.4x without waiting, and still a lower mean turnaround).
LOCALITY_WAIT_S = 30.0
# The traffic graph's pull (plugins/harmonic/README.md): twice best fit's, as data
# locality's, so that one topology level nearer its peers (25 of 100 points on a
# three-level tree) outweighs most packing differences. hal bench harmonic --sim
# (docs/benchmarks.md): 29-31 % of the clients' bytes still cross a leaf switch at 2,
# 28-32 % at 4, up to 39 % at 1 (68-75 % without the graph).
HARMONIC = harmonic.NAME
HARMONIC_WEIGHT = 2.0
# The interference model's push (plugins/dissonance/README.md): twice best fit's, so a
# clash worth 1.25x (about 30 points) outweighs most packing differences while the
# prior's mild 1.05 moves nothing. hal bench harmonic-dissonance (docs/harmonic.md).
DISSONANCE = dissonance.NAME
DISSONANCE_WEIGHT = 2.0
LICENSES = licenses_plugin.NAME
LIMITS = limits.NAME
PREEMPTION = preemption.NAME
# The main-pass plugins of the default profile (``default_profile`` adds ``backfill`` and,
# with a topology, ``topology``).
DEFAULT_PLUGINS = (
    priority.NAME,
    hold.NAME,
    partition.NAME,
    dependency.NAME,
    arraythrottle.NAME,
    reservation_plugin.NAME,
    noderesources.NAME,
    exclusiveuser.NAME,
    nvlink.NAME,
    affinity.NAME,
)


def default_registry(
    *,
    predictor: Predictor | None = None,
    policy: PriorityPolicy | None = None,
    preemption_policy: PreemptionPolicy | None = None,
    partitions: Sequence[Partition] = (),
    licenses: Mapping[str, int] | None = None,
) -> Registry:
    """Every built-in plugin, by name. ``predictor``: the run-time predictor the backfill
    plugin plans with, whatever its args name (the server passes its shared, trained one;
    without it the plugin builds the predictor its ``predictor`` arg names). ``policy``:
    the accounts, users and QoS whose limits the ``limits`` plugin enforces (``hal.toml``;
    none: no limits), and the users' default accounts the ``reservation`` plugin admits.
    ``preemption_policy``: ``[preemption]``, for the ``preemption`` plugin (with the QoS
    ``preempt`` lists of ``policy``) and the queue order (a job's preemption standing
    first: ``partitions`` give the tiers). ``licenses``: ``[licenses]``, the counts the
    ``licenses`` plugin hands out (none: a job asking any waits)."""

    def new_backfill(args: PluginArgs) -> backfill.Backfill:
        return backfill.new(args, predictor)

    def new_limits(args: PluginArgs) -> limits.Limits:
        return limits.new(args, policy)

    def new_licenses(args: PluginArgs) -> licenses_plugin.Licenses:
        return licenses_plugin.new(args, licenses or {})

    def new_reservation(args: PluginArgs) -> reservation_plugin.Reservations:
        return reservation_plugin.new(args, policy)

    def new_preemption(args: PluginArgs) -> preemption.Preempt:
        return preemption.new(args, preemption_policy, policy)

    rank = preemption.standing(preemption_policy, policy.qos if policy else (), partitions)

    def new_priority(args: PluginArgs) -> priority.PrioritySort:
        return priority.new(args, rank)

    return Registry(
        {
            priority.NAME: new_priority,
            hold.NAME: hold.new,
            partition.NAME: partition.new,
            dependency.NAME: dependency.new,
            arraythrottle.NAME: arraythrottle.new,
            LICENSES: new_licenses,
            limits.NAME: new_limits,
            reservation_plugin.NAME: new_reservation,
            noderesources.NAME: noderesources.new,
            exclusiveuser.NAME: exclusiveuser.new,
            nvlink.NAME: nvlink.new,
            affinity.NAME: affinity.new,
            backfill.NAME: new_backfill,
            topology_plugin.NAME: topology_plugin.new,
            datalocality.NAME: datalocality.new,
            harmonic.NAME: harmonic.new,
            dissonance.NAME: dissonance.new,
            preemption.NAME: new_preemption,
        }
    )


def default_profile(
    *,
    topology: Topology | None = None,
    backfill: bool = True,
    limits: bool = False,
    data: bool = False,
    data_weight: float = DATA_WEIGHT,
    locality_wait_s: float = LOCALITY_WAIT_S,
    preemption: bool = False,
    topology_aware: bool = True,
    licenses: bool = False,
    harmonic_weight: float = HARMONIC_WEIGHT,
    dissonance_weight: float = DISSONANCE_WEIGHT,
) -> dict[str, object]:
    """The default profile as a plain config mapping (a fresh copy to edit). The
    ``topology`` plugin is always in it; a ``topology`` (the cluster has one configured)
    gives it the tree's level names; ``topology_aware=False`` leaves it out (baselines that
    measure what topology-aware placement buys). ``backfill=False`` leaves out the backfill
    plugin (strict priority order, as the simulator's ``fcfs`` policy wants).
    ``limits=True`` (some account or QoS limit is configured: ``PriorityPolicy.has_limits``)
    adds the ``limits`` plugin before ``noderesources``; the registry must then be given the
    policy (``default_registry(policy=...)``). ``data=True`` (a data plane is configured)
    adds ``datalocality`` with score weight ``data_weight``, holding a job up to
    ``locality_wait_s`` for a node by its data (delay scheduling; 0: never).
    ``preemption=True`` (``[preemption] type`` is not off) adds the ``preemption``
    PostFilter; the registry must then be given ``preemption_policy``. ``licenses=True``
    (``[licenses]`` names some) adds ``licenses``; the registry must then be given them.
    ``harmonic`` (placement near the jobs a job talks to) is always in it, with score
    weight ``harmonic_weight``; 0 leaves it out (baselines, or a site that wants none).
    ``dissonance`` (keeping classes of work that clash apart) likewise, with
    ``dissonance_weight``."""
    plugins = list(DEFAULT_PLUGINS)
    if limits:
        plugins.insert(plugins.index(noderesources.NAME), LIMITS)
    args: dict[str, object] = {noderesources.NAME: {"score": "best_fit"}}
    if licenses:
        plugins.insert(plugins.index(noderesources.NAME), LICENSES)
    weights: dict[str, object] = {noderesources.NAME: 1, nvlink.NAME: nvlink.NVLINK_WEIGHT}
    if data:
        plugins.append(datalocality.NAME)
        weights[datalocality.NAME] = data_weight
        args[datalocality.NAME] = {"locality_wait": locality_wait_s}
    # always there: without a traffic graph in the snapshot (or peers) it skips
    if harmonic_weight > 0:
        plugins.append(HARMONIC)
        weights[HARMONIC] = harmonic_weight
    # always there: without an interference model in the snapshot (or a class) it skips
    if dissonance_weight > 0:
        plugins.append(DISSONANCE)
        weights[DISSONANCE] = dissonance_weight
    # always there: without a tree it only answers --topology (nvlink domains, unknown
    # levels) and leaves placement to node-score order (SKIP)
    if topology_aware:
        plugins.append(topology_plugin.NAME)
    if topology is not None and topology_aware:
        args[topology_plugin.NAME] = {"level_names": list(topology.level_names)}
    weights[affinity.NAME] = affinity.AFFINITY_WEIGHT  # (--near/--apart, preferred)
    if topology is not None:  # (--near/--apart name the same levels as --topology)
        args[affinity.NAME] = {"level_names": list(topology.level_names)}
    if preemption:
        plugins.append(PREEMPTION)
    if backfill:
        plugins.append(BACKFILL)
        args[BACKFILL] = {}  # EASY with Slurm's default tunables (see the plugin's ``new``)
    return {
        "name": "default",
        "plugins": plugins,
        "score_weights": weights,
        "plugin_args": args,
    }


def build_scheduler(
    config: Mapping[str, object] | None = None, registry: Registry | None = None
) -> Scheduler:
    """A ``Scheduler`` for ``config`` (``default_profile()`` when None). Raises
    ``ProfileError`` naming the bad field."""
    profile = build_profile(
        default_profile() if config is None else config, registry or default_registry()
    )
    return Scheduler(profile)


__all__ = [
    "BACKFILL",
    "DATA_WEIGHT",
    "DEFAULT_PLUGINS",
    "DISSONANCE",
    "DISSONANCE_WEIGHT",
    "HARMONIC",
    "HARMONIC_WEIGHT",
    "LICENSES",
    "LIMITS",
    "LOCALITY_WAIT_S",
    "PREEMPTION",
    "build_scheduler",
    "default_profile",
    "default_registry",
]
