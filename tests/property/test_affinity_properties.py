"""Required --near/--apart rules are never broken by a placement (issue 52).

Random small clusters (2-5 leaf switches of 1-4 four-CPU nodes under 1-2 spines, node
rows shuffled), running jobs of two users and three names (some with required --apart
rules of their own), and 1-5 pending jobs with random rules (near or apart, required
or preferred, by id or name, at node, leaf or spine level) go through a real pass with
the default profile. Then, over everything holding nodes after the pass:

* a placed job with a required --near is, on every one of its nodes, within the rule's
  level of a node of a target (unless the rule names the job's own group);
* no node of a job with a required --apart is within the rule's level of a node of a job
  the rule names, for every pair of which at least one was placed by the pass (running
  pairs are the random setup's, not the scheduler's);
* a preferred rule never keeps a job waiting on its own (reason ``Affinity``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.job_rules import JobRule
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import PendingReason
from hal.core.topology import Topology
from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import cluster, make_job, placed_nodes, reasons
from hal.testing.examples import examples

SCHED: Scheduler = build_scheduler(
    default_profile(topology=Topology(level_names=("leaf", "spine")), backfill=False)
)
NAMES = ("db", "web", "etl")
USERS = ("alice", "alice", "bob")  # (alice twice: most rules name her own jobs)
LEVELS = ("node", "leaf", "spine")


def _nodes(rng: random.Random) -> tuple[list[Node], dict[str, dict[str, str]]]:
    """Nodes with (spine, leaf) paths, rows shuffled, and node → level → domain."""
    nodes: list[Node] = []
    where: dict[str, dict[str, str]] = {}
    spines = rng.randint(1, 2)
    for leaf in range(rng.randint(2, 5)):
        spine = f"s{leaf % spines}"
        for i in range(rng.randint(1, 4)):
            name = f"l{leaf}n{i}"
            nodes.append(Node(name, ResourceVector(4, 8 * GiB), topology=(spine, f"l{leaf}")))
            where[name] = {"node": name, "leaf": f"l{leaf}", "spine": spine}
    rng.shuffle(nodes)
    return nodes, where


def _rule(rng: random.Random, ids: list[int], *, required: bool = False) -> str:
    """A rule towards one of ``ids`` or a name; ``required``, else either kind."""
    mode = "" if required or rng.random() < 0.5 else "preferred="
    target = f"job:{rng.choice(ids)}" if ids and rng.random() < 0.5 else f"name:{rng.choice(NAMES)}"
    return f"{mode}{target}@{rng.choice(LEVELS)}"


def _case(rng: random.Random) -> tuple[list[Node], dict[str, dict[str, str]], list[Job], list[Job]]:
    nodes, where = _nodes(rng)
    free = {n.name: 4 for n in nodes}
    running: list[Job] = []
    for i in range(rng.randint(0, 6)):
        node = rng.choice(nodes).name
        if free[node] == 0:
            continue
        cpus = rng.randint(1, free[node])
        free[node] -= cpus
        held = make_job(100 + i).name(rng.choice(NAMES)).user(rng.choice(USERS)).cpus(cpus)
        if rng.random() < 0.3:
            held = held.apart(_rule(rng, [], required=True))
        running.append(held.running_on(node).build())
    ids = [j.id for j in running]
    pending: list[Job] = []
    count = rng.randint(1, 5)
    for k in range(1, count + 1):
        others = ids + [i for i in range(1, count + 1) if i != k]
        job = make_job(k).name(rng.choice(NAMES)).user(rng.choice(USERS))
        job = job.cpus(rng.randint(1, 3)).nodes(rng.choice((1, 1, 2))).priority(-k)
        near = [_rule(rng, others) for _ in range(rng.randint(0, 2))]
        apart = [_rule(rng, others) for _ in range(rng.randint(0, 2))]
        if near:
            job = job.near(*near)
        if apart:
            job = job.apart(*apart)
        pending.append(job.build())
    return nodes, where, running, pending


def _within(where: dict[str, dict[str, str]], level: str) -> Callable[[str, str], bool]:
    return lambda a, b: where[a][level] == where[b][level]


def _named(rule: JobRule, owner: Job, holding: dict[int, tuple[Job, tuple[str, ...]]]) -> set[str]:
    """The nodes of every job holding nodes that ``rule`` (``owner``'s) names."""
    return {
        node
        for job, nodes in holding.values()
        if job.id != owner.id and rule.names(job, owner.spec.user)
        for node in nodes
    }


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_required_rules_are_never_broken_by_a_placement(seed: int) -> None:
    nodes, where, running, pending = _case(random.Random(seed))
    snap = cluster().nodes(*nodes).running(*running).pending(*pending).build()
    plan = SCHED.schedule(snap)
    placed = placed_nodes(plan)
    holding = {j.id: (j, j.allocation.nodes) for j in running if j.allocation is not None}
    holding.update((j.id, (j, placed[j.id])) for j in pending if j.id in placed)
    new = set(placed)
    for job, mine in holding.values():
        for rule in job.spec.near:
            if not rule.required or job.id not in new or rule.names_itself(job):
                continue
            targets = _named(rule, job, holding)
            near = _within(where, rule.level)
            assert targets, f"job {job.id} placed by --near={rule} with no target"
            assert all(any(near(n, t) for t in targets) for n in mine), (job.id, rule)
        for rule in job.spec.apart:
            if not rule.required:
                continue
            near = _within(where, rule.level)
            for other, theirs in holding.values():
                if other.id == job.id or not rule.names(other, job.spec.user):
                    continue
                if job.id not in new and other.id not in new:
                    continue
                assert not any(near(a, b) for a in mine for b in theirs), (job.id, other.id, rule)
    why = reasons(plan)
    for job in pending:
        if why.get(job.id) is PendingReason.AFFINITY:
            assert any(r.required for r in (*job.spec.near, *job.spec.apart)) or any(
                r.required and r.names(job, owner.spec.user)
                for owner, _ in holding.values()
                for r in owner.spec.apart
            ), job.id
