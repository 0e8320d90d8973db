"""The submit check and the scheduler agree on which label levels a cluster has, on
random clusters where some nodes carry no label at all (agents started without
--topology-label beside labelled ones) and levels are missing at random.

* a level is accepted at submit (``present_levels``, what ``hal.state.topology_levels``
  uses) exactly when the scheduler does not call a one-node ``required=LEVEL`` job
  BadConstraints: a job the server took never turns unresolvable for that reason;
* a multi-node ``required=LEVEL`` job never spans two domains of that level, and never
  takes an unlabelled node beside another one (such a node is a domain of its own).
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import PendingReason
from hal.core.topology_labels import LABEL_LEVELS, label_path, present_levels
from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import cluster, make_job, placed_nodes, reasons
from hal.testing.examples import examples

SCHED: Scheduler = build_scheduler(default_profile())


def _case(rng: random.Random) -> list[Node]:
    """Up to ~100 nodes; each label level is used with probability 1/2 (rack 3/4), and
    each node has no label at all with probability 0.15."""
    used = {k: rng.random() < (0.75 if k == "rack" else 0.5) for k in LABEL_LEVELS}
    nodes: list[Node] = []
    for i in range(rng.randint(1, 100)):
        labels: dict[str, str] = {}
        if rng.random() >= 0.15:
            labels = {k: f"{k[0]}{rng.randrange(3)}" for k in LABEL_LEVELS if used[k]}
        name = f"n{i}"
        nodes.append(
            Node(
                name,
                ResourceVector(4, 8 * GiB),
                topology=label_path(name, labels),
                labels=labels,
            )
        )
    return nodes


def _run(nodes: list[Node], count: int, level: str) -> tuple[tuple[str, ...] | None, object]:
    job = make_job(1).nodes(count).topology(level, required=True)
    plan = SCHED.schedule(cluster().nodes(*nodes).pending(job).build())
    return placed_nodes(plan).get(1), reasons(plan).get(1)


def _domain(node: Node, level: str) -> tuple[str, ...]:
    """The node's domain at ``level``: its path down to that level (a node without a
    path is a domain of its own)."""
    if not node.topology:
        return ("~" + node.name,)
    return node.topology[: len(LABEL_LEVELS) - LABEL_LEVELS.index(level)]


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_submit_and_scheduler_agree_on_levels(seed: int) -> None:
    nodes = _case(random.Random(seed))
    accepted = set(present_levels(n.labels for n in nodes))
    for level in LABEL_LEVELS:
        placed, reason = _run(nodes, 1, level)
        refused = reason is PendingReason.BAD_CONSTRAINTS
        assert refused == (level not in accepted), (level, accepted, reason)
        assert (placed is not None) == (level in accepted)


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(2, 30), pick=st.integers(0, 3))
def test_required_level_never_spans_domains(seed: int, count: int, pick: int) -> None:
    nodes = _case(random.Random(seed))
    level = LABEL_LEVELS[pick]
    if level not in present_levels(n.labels for n in nodes):
        return
    placed, _ = _run(nodes, count, level)
    if placed is None:
        return
    by_name = {n.name: n for n in nodes}
    assert len(placed) == count
    assert len({_domain(by_name[p], level) for p in placed}) == 1
    assert all(by_name[p].labels for p in placed)
