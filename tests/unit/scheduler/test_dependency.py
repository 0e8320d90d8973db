"""dependency: every kind, ',' and '?', unknown targets, singleton, kill_on_invalid_dep."""

from __future__ import annotations

import pytest

from hal.core.states import JobState as S
from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler, Termination
from hal.testing import JobBuilder, cluster, make_job, make_node, placed_nodes, reasons

J = make_job

RUN = J(5).state(S.RUNNING)
PEND = J(5).state(S.PENDING)
OK = J(5).state(S.COMPLETED, 0)
FAIL = J(5).state(S.FAILED, 3)
CANC = J(5).state(S.CANCELLED)
TO = J(5).state(S.TIMEOUT)

# (situation, dependency text, related jobs, expected reason or None = starts)
CASES: list[tuple[str, str, list[JobBuilder], R | None]] = [
    ("after: target still pending", "after:5", [PEND], R.DEPENDENCY),
    ("after: target started", "after:5", [RUN], None),
    ("after: target cancelled before starting", "after:5", [CANC], None),
    ("afterany: target running", "afterany:5", [RUN], R.DEPENDENCY),
    ("afterany: target failed", "afterany:5", [FAIL], None),
    ("afterok: target running", "afterok:5", [RUN], R.DEPENDENCY),
    ("afterok: target completed 0", "afterok:5", [OK], None),
    ("afterok: target failed", "afterok:5", [FAIL], R.DEPENDENCY_NEVER_SATISFIED),
    ("afterok: target timed out", "afterok:5", [TO], R.DEPENDENCY_NEVER_SATISFIED),
    ("afternotok: target running", "afternotok:5", [RUN], R.DEPENDENCY),
    ("afternotok: target failed", "afternotok:5", [FAIL], None),
    ("afternotok: target cancelled", "afternotok:5", [CANC], None),
    ("afternotok: target completed 0", "afternotok:5", [OK], R.DEPENDENCY_NEVER_SATISFIED),
    ("unknown target never satisfies", "afterok:404", [], R.DEPENDENCY_NEVER_SATISFIED),
    ("unknown target with after", "after:404", [], R.DEPENDENCY_NEVER_SATISFIED),
    ("all of: one still running", "afterok:5,afterok:6", [OK, J(6).state(S.RUNNING)], R.DEPENDENCY),
    ("all of: both ok", "afterok:5:6", [OK, J(6).state(S.COMPLETED)], None),
    (
        "all of: one failed",
        "afterok:5,afterany:6",
        [FAIL, J(6).state(S.RUNNING)],
        R.DEPENDENCY_NEVER_SATISFIED,
    ),
    ("any of: one ok", "afterok:5?afterok:6", [FAIL, J(6).state(S.COMPLETED)], None),
    (
        "any of: one failed one running",
        "afterok:5?afterok:6",
        [FAIL, J(6).state(S.RUNNING)],
        R.DEPENDENCY,
    ),
    (
        "any of: both failed",
        "afterok:5?afterok:6",
        [FAIL, J(6).state(S.FAILED, 1)],
        R.DEPENDENCY_NEVER_SATISFIED,
    ),
    ("any of within one term", "afterok:5:6?afterany:404", [FAIL, J(6).state(S.COMPLETED)], None),
    # an array's id stands for all of its elements (5 is element 0 of array 5, 6 element 1)
    (
        "afterok on an array: element 0 done, element 1 running",
        "afterok:5",
        [J(5).array(5, 0).state(S.COMPLETED, 0), J(6).array(5, 1).state(S.RUNNING)],
        R.DEPENDENCY,
    ),
    (
        "afterok on an array: every element done",
        "afterok:5",
        [J(5).array(5, 0).state(S.COMPLETED, 0), J(6).array(5, 1).state(S.COMPLETED, 0)],
        None,
    ),
    (
        "afterok on an array: one element failed",
        "afterok:5",
        [J(5).array(5, 0).state(S.COMPLETED, 0), J(6).array(5, 1).state(S.FAILED, 1)],
        R.DEPENDENCY_NEVER_SATISFIED,
    ),
    (
        "aftercorr from a job that is no array element: on every element",
        "aftercorr:5",
        [J(5).array(5, 0).state(S.COMPLETED, 0), J(6).array(5, 1).state(S.RUNNING)],
        R.DEPENDENCY,
    ),
    (
        "afternotok on an array: all ended, one failed",
        "afternotok:5",
        [J(5).array(5, 0).state(S.COMPLETED, 0), J(6).array(5, 1).state(S.FAILED, 1)],
        None,
    ),
]


@pytest.mark.parametrize(
    ("situation", "dep", "related", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_dependency(
    sched: Scheduler, situation: str, dep: str, related: list[JobBuilder], expected: R | None
) -> None:
    """A job with --dependency against targets in given states."""
    snap = cluster().nodes(make_node("a")).related(*related).pending(J(1).depends(dep)).build()
    plan = sched.schedule(snap)
    if expected is None:
        assert 1 in placed_nodes(plan)
    else:
        assert reasons(plan) == {1: expected}
        assert plan.terminations == ()


def test_kill_on_invalid_dep_cancels_the_job(sched: Scheduler) -> None:
    """--kill-on-invalid-dep with afterok on a failed job: the plan cancels it."""
    snap = (
        cluster()
        .nodes(make_node("a"))
        .related(FAIL)
        .pending(J(1).depends("afterok:5", kill_on_invalid=True))
        .build()
    )
    plan = sched.schedule(snap)
    assert plan.terminations == (Termination(1, S.CANCELLED, R.DEPENDENCY_NEVER_SATISFIED),)
    assert plan.updates == ()


# (situation, the array element our element depends on, expected)
CORR: list[tuple[str, list[JobBuilder], R | None]] = [
    ("same index completed ok", [J(20).array(20, 0), J(23).array(20, 3).state(S.COMPLETED)], None),
    (
        "same index still running",
        [J(20).array(20, 0), J(23).array(20, 3).state(S.RUNNING)],
        R.DEPENDENCY,
    ),
    (
        "same index failed",
        [J(20).array(20, 0), J(23).array(20, 3).state(S.FAILED, 1)],
        R.DEPENDENCY_NEVER_SATISFIED,
    ),
    (
        "other index ok does not count",
        [J(20).array(20, 0).state(S.COMPLETED), J(23).array(20, 3).state(S.RUNNING)],
        R.DEPENDENCY,
    ),
    # array 20 has no element 3: Slurm judges the whole array then (all must complete ok)
    (
        "no such index: element 0 ok, element 1 running",
        [J(20).array(20, 0).state(S.COMPLETED), J(21).array(20, 1).state(S.RUNNING)],
        R.DEPENDENCY,
    ),
    (
        "no such index: element 0 ok, element 1 failed",
        [J(20).array(20, 0).state(S.COMPLETED), J(21).array(20, 1).state(S.FAILED, 1)],
        R.DEPENDENCY_NEVER_SATISFIED,
    ),
    (
        "no such index: every element ok",
        [J(20).array(20, 0).state(S.COMPLETED), J(21).array(20, 1).state(S.COMPLETED)],
        None,
    ),
]


@pytest.mark.parametrize(("situation", "related", "expected"), CORR, ids=[c[0] for c in CORR])
def test_aftercorr(
    sched: Scheduler, situation: str, related: list[JobBuilder], expected: R | None
) -> None:
    """Element 3 of array 30 with aftercorr:20 waits for element 3 of array 20."""
    job = J(33).array(30, 3).depends("aftercorr:20")
    snap = cluster().nodes(make_node("a")).related(*related).pending(job).build()
    plan = sched.schedule(snap)
    if expected is None:
        assert 33 in placed_nodes(plan)
    else:
        assert reasons(plan) == {33: expected}


SINGLETON: list[tuple[str, list[JobBuilder], R | None]] = [
    ("no other job with the name", [], None),
    ("same name and user running", [J(9).name("nightly").running_on("b")], R.DEPENDENCY),
    ("same name, other user running", [J(9).name("nightly").user("bob").running_on("b")], None),
    ("same user, other name running", [J(9).name("other").running_on("b")], None),
    (
        "same name suspended",
        [J(9).name("nightly").running_on("b", state=S.SUSPENDED)],
        R.DEPENDENCY,
    ),
]


@pytest.mark.parametrize(
    ("situation", "running", "expected"), SINGLETON, ids=[c[0] for c in SINGLETON]
)
def test_singleton(
    sched: Scheduler, situation: str, running: list[JobBuilder], expected: R | None
) -> None:
    """--dependency=singleton waits while a job with its name and user runs."""
    snap = (
        cluster()
        .nodes(make_node("a"), make_node("b"))
        .running(*running)
        .pending(J(1).name("nightly").depends("singleton"))
        .build()
    )
    plan = sched.schedule(snap)
    if expected is None:
        assert 1 in placed_nodes(plan)
    else:
        assert reasons(plan) == {1: expected}


def test_two_singletons_in_one_pass_start_one(sched: Scheduler) -> None:
    """Two pending singletons with the same name: the first starts, the second waits."""
    snap = (
        cluster()
        .nodes(make_node("a"))
        .pending(J(1).name("n").depends("singleton"), J(2).name("n").depends("singleton"))
        .build()
    )
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {1}
    assert reasons(plan) == {2: R.DEPENDENCY}


def test_dependency_message_has_slurm_shape(sched: Scheduler) -> None:
    """The waiting message reads like squeue's %E: afterok:5(unfulfilled)."""
    snap = cluster().nodes(make_node("a")).related(RUN).pending(J(1).depends("afterok:5")).build()
    assert sched.run_pass(snap).statuses[1].message == "afterok:5(unfulfilled)"
