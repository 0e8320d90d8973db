"""The autoscaler's decisions, as pure functions: which nodes to create for the waiting
jobs, and which idle nodes to remove. ``hal.server.cloud`` reads the cluster, calls these
and carries the decisions out through the providers.

Scale-up is Kubernetes' cluster autoscaler's shape: each pass starts from what exists,
so a decision is never remembered, only re-derived. Waiting jobs, in priority order, are
packed first into the group nodes already made (booting ones, whose whole size is free,
and joined ones with room the scheduler has not yet used), then into nodes this pass
opens, and only then into new nodes, from the group where the job is expected to cost
least to finish (``hal.cloud.burst``, which also says which groups may open nodes for it
at all), or without such costs the group whose nodes cost least an hour (ties: the
smaller machine, then config order). A multi-node job takes what the cheapest
group has, then the next group's; nodes outside the groups with room for it count
towards its count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hal.core.job import JobSpec
from hal.core.node import Node, Partition, gpu_type_matches
from hal.core.node_groups import NodeGroup
from hal.core.resources import ResourceVector


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job waiting for nodes, with the partitions it may run in."""

    job_id: int
    spec: JobSpec
    partitions: tuple[Partition, ...]
    # of a multi-node job, the nodes outside the groups that can take its share now:
    # the groups make up the rest of its count
    others: int = 0
    # group → its expected cost to finish the job (``hal.cloud.burst``): only these
    # groups open new nodes for it, the cheapest first; None: every group, by price
    costs: Mapping[str, float] | None = None


@dataclass(slots=True)
class _Bin:
    name: str
    free: ResourceVector
    whole: bool = False  # taken by an --exclusive job
    new: bool = False  # to be created by this pass (else booting)


@dataclass(frozen=True, slots=True)
class ScaleUp:
    group: str
    names: tuple[str, ...]  # the nodes to create
    jobs: tuple[int, ...]  # the jobs they are made for, in priority order
    # each node's own jobs of those (``hal explain`` names the nodes made for a job)
    per_node: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class _Plan:
    bins: dict[str, list[_Bin]] = field(default_factory=dict)  # group → booting and new
    new: dict[str, list[str]] = field(default_factory=dict)  # group → names to create
    jobs: dict[str, list[int]] = field(default_factory=dict)
    per_node: dict[str, list[int]] = field(default_factory=dict)  # new node → its jobs


def plan_scale_up(
    waiting: Iterable[Waiting],
    groups: Sequence[NodeGroup],
    existing: Iterable[str],
    spare: Mapping[str, tuple[str, ResourceVector]],
) -> list[ScaleUp]:
    """The nodes to create for ``waiting``. ``existing``: every node name that has an
    instance or a registered node (not to be created again); ``spare``: node → (group,
    room left) of the group's nodes already made: booting ones (all their size) and
    joined ones the scheduler may not yet have filled. Groups left out of ``groups``
    (resting after a failure) open nothing; their spare nodes still count."""
    taken = set(existing) | set(spare)
    known = {g.name for g in groups}
    templates = [(g, g.template(g.name)) for g in groups]  # (once a pass, not once a job)
    plan = _Plan()
    for node, (of, room) in sorted(spare.items()):
        if of in known:
            plan.bins.setdefault(of, []).append(_Bin(node, room))
    for job in waiting:
        placed = _place(job, templates, plan.bins, taken)
        if placed is None:
            continue
        reuse, new = placed
        touched: set[str] = set()
        for group, b in reuse:
            _take(b, _want(job.spec, group), job.spec.exclusive)
            if b.new:
                touched.add(group.name)
                plan.per_node[b.name].append(job.job_id)
        for group, name in new:
            b = _Bin(name, group.resources, new=True)
            _take(b, _want(job.spec, group), job.spec.exclusive)
            plan.bins.setdefault(group.name, []).append(b)
            plan.new.setdefault(group.name, []).append(name)
            plan.per_node[name] = [job.job_id]
            taken.add(name)
            touched.add(group.name)
        for name in touched:
            plan.jobs.setdefault(name, []).append(job.job_id)
    return [
        ScaleUp(
            g.name,
            tuple(plan.new[g.name]),
            tuple(plan.jobs[g.name]),
            {n: tuple(plan.per_node[n]) for n in plan.new[g.name]},
        )
        for g in groups
        if plan.new.get(g.name)
    ]


def _want(spec: JobSpec, group: NodeGroup) -> ResourceVector:
    return _share(spec, group.resources.memory_bytes)


def _share(spec: JobSpec, node_memory: int) -> ResourceVector:
    """The job's request on each of its nodes, on a node of ``node_memory``."""
    return spec.request_per_node(max(1, spec.nodes_min), node_memory)


def _take(b: _Bin, want: ResourceVector, exclusive: bool) -> None:
    b.free = b.free - want
    b.whole = b.whole or exclusive


def holds(spec: JobSpec, node: Node, room: ResourceVector | None = None) -> bool:
    """Whether ``node`` (a joined one, or a group's template), or ``room`` of it, can
    hold the job's share of a node: its features, GPU type and size."""
    if not set(spec.constraint) <= set(node.features):
        return False
    if spec.typed_gpus is not None and not gpu_type_matches(spec.typed_gpus, node.gpu_model):
        return False
    want = _share(spec, node.resources.memory_bytes)
    return want.fits_in(node.resources if room is None else room)


def _place(
    job: Waiting,
    groups: Sequence[tuple[NodeGroup, Node]],
    bins: Mapping[str, list[_Bin]],
    taken: set[str],
) -> tuple[list[tuple[NodeGroup, _Bin]], list[tuple[NodeGroup, str]]] | None:
    """The nodes ``job`` would take beyond the ``others`` it has: nodes already made with
    room, then new names, each from the cheapest group first (a multi-node job may mix
    groups); None where they cannot make up its count."""
    spec = job.spec
    if spec.nodelist or spec.reservation or spec.het is not None:
        return None  # named nodes, a reservation's or a het job's: not the autoscaler's
    need = max(1, spec.nodes_min) - job.others
    if need <= 0:
        return None  # it waits for nodes that exist
    costs = job.costs
    fitting = sorted(
        ((costs.get(g.name, 0.0) if costs else g.price_per_hour, g.resources.cpus, i), g)
        for i, (g, template) in enumerate(groups)
        if holds(spec, template)
    )

    def usable(name: str) -> bool:
        return name not in spec.exclude and any(p.contains(name) for p in job.partitions)

    reuse: list[tuple[NodeGroup, _Bin]] = []
    for _, group in fitting:
        want = _want(spec, group)
        for b in bins.get(group.name, []):
            if len(reuse) < need and usable(b.name) and _room(b, want, spec, group):
                reuse.append((group, b))
    new: list[tuple[NodeGroup, str]] = []
    for _, group in fitting:
        if costs is not None and group.name not in costs:
            continue  # not worth its boot for this job (its nodes already made are)
        for name in group.nodes:
            if len(reuse) + len(new) < need and name not in taken and usable(name):
                new.append((group, name))
    if len(reuse) + len(new) < need:
        return None
    return reuse, new


def _room(b: _Bin, want: ResourceVector, spec: JobSpec, group: NodeGroup) -> bool:
    exclusive_ok = not spec.exclusive or b.free == group.resources
    return not b.whole and want.fits_in(b.free) and exclusive_ok


def idle_to_remove(
    idle_since: Mapping[str, float], groups: Sequence[NodeGroup], now: float
) -> list[str]:
    """The joined nodes idle past their group's ``idle_seconds`` (0: kept), longest
    idle first. ``idle_since``: node → when it last had no job (running nodes absent)."""
    limit = {n: g.idle_seconds for g in groups for n in g.nodes}
    due = [
        (since, node)
        for node, since in idle_since.items()
        if limit.get(node) and now - since >= limit[node]
    ]
    return [node for _, node in sorted(due)]
