"""Owned nodes that sleep (``[power]``, Slurm's power saving): the phases a node goes
through and the decisions of ``hal.server.power``, as pure functions.

A node's phase is kept in its record, so that a restarted server knows it: the node is
drained (nothing new lands on it) with one of the reasons below. sinfo shows it as
Slurm does (``hal.state.node_flags``):

- ``power down requested`` (``!``): an operator asked (``scontrol update
  state=power_down``) while jobs still run there; powered down once they end;
- ``powering down`` (``%``): the suspend program was run; for ``suspend_timeout``;
- ``powered down`` (``~``): asleep; a waiting job that needs it wakes it;
- ``powering up`` (``#``): the resume program was run; its agent has
  ``resume_timeout`` to join, else the node goes DOWN.

``capacity`` is what a burst decision needs of them: the nodes asleep or waking and
when each could start a job if it were woken now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from hal.core.job import JobSpec
from hal.core.node import Node, Partition, gpu_type_matches
from hal.core.resources import ResourceVector
from hal.core.states import NodeState

MINUTE_S = 60.0


class Phase(StrEnum):
    """A node's power phase, named as Slurm's state flags (``-t power_down`` ...)."""

    REQUESTED = "POWER_DOWN"  # `!`
    POWERING_DOWN = "POWERING_DOWN"  # `%`
    POWERED_DOWN = "POWERED_DOWN"  # `~`
    POWERING_UP = "POWERING_UP"  # `#`


# the drain reason of each phase (the server's own; an operator's drain is no phase)
REASONS = {
    Phase.REQUESTED: "power: power down requested",
    Phase.POWERING_DOWN: "power: powering down",
    Phase.POWERED_DOWN: "power: powered down",
    Phase.POWERING_UP: "power: powering up",
}
_PHASES = {reason: phase for phase, reason in REASONS.items()}


def phase_of(node: Node) -> Phase | None:
    """The node's power phase; None for a node awake (or drained by someone else)."""
    if node.state is not NodeState.DRAIN:
        return None
    return _PHASES.get(node.reason)


@dataclass(frozen=True, slots=True)
class Asleep:
    """A node asleep or waking, as capacity: its size, and when it could start a job if
    it were woken now (``ready_at``, seconds since the epoch)."""

    node: Node
    phase: Phase
    ready_at: float


def capacity(
    nodes: Iterable[Node],
    since: Mapping[str, float],
    now: float,
    *,
    boot_s: float,
    suspend_timeout: float,
) -> list[Asleep]:
    """The nodes powered down, powering down or up, each with its expected wake time:
    ``boot_s`` from now (powered down), from its resume (powering up), or from the end
    of its power-down (powering down). ``since``: node → when its phase began (now where
    missing). A node whose power-down was only requested runs jobs and is not listed."""
    out = []
    for node in nodes:
        phase = phase_of(node)
        if phase is None or phase is Phase.REQUESTED:
            continue
        began = since.get(node.name, now)
        if phase is Phase.POWERING_UP:
            ready = max(now, began + boot_s)
        elif phase is Phase.POWERING_DOWN:
            ready = max(now, began + suspend_timeout) + boot_s
        else:
            ready = now + boot_s
        out.append(Asleep(node, phase, ready))
    return sorted(out, key=lambda a: (a.ready_at, a.node.name))


def rate_left(done_at: Iterable[float], rate: int, now: float) -> int:
    """How many more nodes may change this minute: ``rate`` a minute (0: no limit)
    less those of ``done_at`` within the last minute."""
    if rate <= 0:
        return 1 << 30
    return max(0, rate - sum(1 for t in done_at if now - t < MINUTE_S))


def to_suspend(
    idle_since: Mapping[str, float], suspend_time: float, now: float, allowed: int
) -> list[str]:
    """The idle nodes to power down now: idle for ``suspend_time`` (<= 0: none), the
    longest idle first, at most ``allowed``."""
    if suspend_time <= 0 or allowed <= 0:
        return []
    due = sorted((since, n) for n, since in idle_since.items() if now - since >= suspend_time)
    return [n for _, n in due[:allowed]]


@dataclass(frozen=True, slots=True)
class Want:
    """A job waiting for nodes: its request, the partitions it may run in, and how many
    awake nodes have room for its share now (those count towards its node count)."""

    job_id: int
    spec: JobSpec
    partitions: tuple[Partition, ...]
    awake: int = 0


@dataclass(slots=True)
class _Bin:
    node: Node
    free: ResourceVector
    whole: bool = False  # taken by an --exclusive job


@dataclass(slots=True)
class _Plan:
    bins: list[_Bin] = field(default_factory=list)  # waking and chosen nodes
    chosen: dict[str, list[int]] = field(default_factory=dict)  # node to wake → jobs


def plan_resume(
    waiting: Iterable[Want],
    asleep: Sequence[Node],
    waking: Sequence[Node],
    allowed: int,
) -> dict[str, tuple[int, ...]]:
    """The powered-down nodes to wake for ``waiting`` (in priority order), each with
    the jobs it is woken for; at most ``allowed`` nodes. A job is packed first into the
    nodes already waking (their whole size) and those this plan wakes, then into new
    ones, in name order; a job that names nodes (``--nodelist``) wakes those of them
    that sleep. Jobs the asleep nodes cannot complete wake nothing."""
    plan = _Plan(bins=[_Bin(n, n.resources) for n in waking])
    free = sorted(asleep, key=lambda n: n.name)
    for job in waiting:
        if len(plan.chosen) >= allowed:
            break
        if job.spec.reservation or job.spec.het is not None:
            continue  # a reservation's nodes or a het job's: not woken here
        if job.spec.nodelist:
            named = [n for n in free if n.name in job.spec.nodelist and n.name not in plan.chosen]
            for node in named[: allowed - len(plan.chosen)]:
                plan.chosen[node.name] = [job.job_id]
                plan.bins.append(_Bin(node, node.resources))
            continue
        _place(job, free, plan, allowed)
    return {n: tuple(jobs) for n, jobs in plan.chosen.items()}


def _place(job: Want, free: Sequence[Node], plan: _Plan, allowed: int) -> None:
    spec = job.spec
    need = max(1, spec.nodes_min) - job.awake
    if need <= 0:
        return  # it waits for awake nodes

    def usable(node: Node) -> bool:
        return node.name not in spec.exclude and any(p.contains(node.name) for p in job.partitions)

    reuse = [b for b in plan.bins if usable(b.node) and not b.whole and _room(spec, b.node, b)][
        :need
    ]
    new: list[Node] = []
    for node in free:
        if len(reuse) + len(new) >= need or len(plan.chosen) + len(new) >= allowed:
            break
        if node.name not in plan.chosen and usable(node) and fits(spec, node):
            new.append(node)
    if len(reuse) + len(new) < need:
        return
    for b in reuse:
        _take(b, spec)
        if b.node.name in plan.chosen:
            plan.chosen[b.node.name].append(job.job_id)
    for node in new:
        b = _Bin(node, node.resources)
        _take(b, spec)
        plan.bins.append(b)
        plan.chosen[node.name] = [job.job_id]


def _room(spec: JobSpec, node: Node, b: _Bin) -> bool:
    if spec.exclusive and b.free != node.resources:
        return False
    return fits(spec, node, b.free)


def _take(b: _Bin, spec: JobSpec) -> None:
    want = spec.request_per_node(max(1, spec.nodes_min), b.node.resources.memory_bytes)
    b.free = b.free - want
    b.whole = b.whole or spec.exclusive


def fits(spec: JobSpec, node: Node, room: ResourceVector | None = None) -> bool:
    """Whether ``node`` (or ``room`` of it) can hold the job's share of a node: its
    features, GPU type and size."""
    if not set(spec.constraint) <= set(node.features):
        return False
    if spec.typed_gpus is not None and not gpu_type_matches(spec.typed_gpus, node.gpu_model):
        return False
    want = spec.request_per_node(max(1, spec.nodes_min), node.resources.memory_bytes)
    return want.fits_in(node.resources if room is None else room)


def power_counts(nodes: Iterable[Node]) -> dict[Phase, int]:
    """How many of ``nodes`` are in each power phase (``hal_power_nodes``)."""
    out = dict.fromkeys(Phase, 0)
    for node in nodes:
        phase = phase_of(node)
        if phase is not None:
            out[phase] += 1
    return out
