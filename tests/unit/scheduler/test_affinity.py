"""affinity: --near and --apart between jobs, required (a filter) or preferred (a score),
at node, leaf switch, rack and NVLink-domain level, against running jobs and jobs placed
earlier in the same pass, and both ways round for a required --apart."""

from __future__ import annotations

from collections.abc import Sequence

from hal.core.states import PendingReason as R
from hal.core.topology import Topology
from hal.scheduler.framework import ClusterSnapshot, Code, Framework, PassContext, Scheduler
from hal.scheduler.framework.explain import diagnose
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.server.explain import _detail
from hal.testing import JobBuilder, NodeBuilder, cluster, make_job, make_node, placed_nodes, reasons

J = make_job
SCHED: Scheduler = build_scheduler(
    default_profile(topology=Topology(level_names=("leaf", "spine")), backfill=False)
)


def _tree() -> list[NodeBuilder]:
    """Leaves a and b (two 8-CPU nodes each) under one spine: a-0 a-1 b-0 b-1."""
    return [make_node(f"{leaf}-{i}").topology("s0", leaf) for leaf in "ab" for i in range(2)]


def _run(
    *pending: JobBuilder,
    running: tuple[JobBuilder, ...] = (),
    nodes: Sequence[NodeBuilder] = (),
) -> tuple[dict[int, tuple[str, ...]], dict[int, R]]:
    """One pass over ``nodes`` (default: ``_tree()``): placements and pending reasons."""
    snap = cluster().nodes(*(nodes or _tree())).running(*running).pending(*pending).build()
    plan = SCHED.schedule(snap)
    return placed_nodes(plan), reasons(plan)


def _filler(job_id: int, node: str, cpus: int) -> JobBuilder:
    """A running job holding ``cpus`` CPUs of ``node`` (best fit then prefers that node)."""
    return J(job_id).cpus(cpus).running_on(node)


# -- required near --------------------------------------------------------------------


def test_near_at_node_goes_to_the_targets_node_not_the_best_fit() -> None:
    """a-0 is the fullest node (best fit's pick); the target holds one CPU of b-1."""
    placed, _ = _run(
        J(1).near("job:11@node"), running=(_filler(10, "a-0", 4), _filler(11, "b-1", 1))
    )
    assert placed[1] == ("b-1",)


def test_near_at_leaf_stays_under_the_targets_leaf_switch() -> None:
    placed, _ = _run(
        J(1).near("job:11@leaf"), running=(_filler(10, "a-0", 4), _filler(11, "b-0", 1))
    )
    assert placed[1][0].startswith("b-")


def test_a_multi_node_job_near_at_leaf_puts_every_node_under_it() -> None:
    placed, _ = _run(
        J(1).nodes(2).near("job:11@leaf"),
        running=(_filler(10, "a-0", 4), _filler(11, "b-0", 1)),
    )
    assert sorted(placed[1]) == ["b-0", "b-1"]


def test_near_a_name_means_the_users_own_jobs_of_that_name() -> None:
    """Bob's ``db`` runs on a-1, Alice's on b-1: Alice's rule follows hers."""
    placed, _ = _run(
        J(1).near("name:db@node"),
        running=(
            _filler(10, "a-0", 4),
            J(11).name("db").user("bob").cpus(1).running_on("a-1"),
            J(12).name("db").cpus(1).running_on("b-1"),
        ),
    )
    assert placed[1] == ("b-1",)


def test_near_an_array_id_means_any_of_its_elements() -> None:
    placed, _ = _run(
        J(1).near("job:20@node"),
        running=(_filler(10, "a-0", 4), J(21).array(20, 1).cpus(1).running_on("b-0")),
    )
    assert placed[1] == ("b-0",)


def test_near_a_target_still_pending_waits_with_reason_affinity() -> None:
    """Job 5 needs 16 CPUs and cannot start; job 1 waits for it, holding nobody back:
    job 2 behind it starts."""
    placed, why = _run(J(1).near("job:5@node"), J(5).cpus(16).priority(-1), J(2).priority(-2))
    assert 1 not in placed and why[1] is R.AFFINITY and 2 in placed


def test_near_a_job_that_is_gone_can_never_hold() -> None:
    snap = cluster().nodes(*_tree()).pending(J(1).near("job:77@node")).build()
    ctx = PassContext.from_snapshot(snap)
    out = Framework(SCHED.profile).pre_filter(ctx, snap.pending[0])
    assert out is not None and out.status.code is Code.UNRESOLVABLE
    assert out.status.reason is R.AFFINITY
    assert "job 77 is neither pending nor running" in out.status.message


def test_near_a_target_whose_nodes_are_full_waits_and_holds_nobody_back() -> None:
    """Every CPU of leaf b is taken; the near@leaf job waits on its rule (Affinity, not
    Resources), and the job behind it starts on leaf a."""
    placed, why = _run(
        J(1).near("job:11@leaf"),
        J(2).priority(-1),
        running=(J(11).cpus(8).running_on("b-0"), J(12).cpus(8).running_on("b-1")),
    )
    assert 1 not in placed and why[1] is R.AFFINITY
    assert placed[2][0].startswith("a-")


def test_a_job_placed_earlier_in_the_pass_is_a_target() -> None:
    """Job 1 (first in the queue) goes to b-1; job 2, near it, joins it there rather
    than take the fuller a-0."""
    placed, _ = _run(
        J(1).cpus(2).nodelist("b-1"),
        J(2).priority(-1).near("job:1@node"),
        running=(_filler(10, "a-0", 4),),
    )
    assert placed[1] == placed[2] == ("b-1",)


def test_an_array_near_its_own_name_starts_anywhere_then_keeps_together() -> None:
    """Nothing named ``w`` runs: the first element goes by best fit (a-0, 3 CPUs free);
    the others must join it there, find no room, and wait on the rule."""
    elements = [J(30 + i).array(30, i).name("w").cpus(2).near("name:w@node") for i in range(3)]
    placed, why = _run(*elements, running=(_filler(10, "a-0", 5),))
    assert placed[30] == ("a-0",)
    assert 31 not in placed and why[31] is R.AFFINITY and why[32] is R.AFFINITY


def test_a_level_the_nodes_lack_is_bad_constraints() -> None:
    placed, why = _run(J(1).near("job:11@rack"), running=(_filler(11, "a-0", 1),))
    assert 1 not in placed and why[1] is R.BAD_CONSTRAINTS


def test_near_at_rack_on_a_label_tree() -> None:
    nodes = [
        make_node("x1").labels(rack="r1", zone="z1"),
        make_node("x2").labels(rack="r1", zone="z1"),
        make_node("y1").labels(rack="r2", zone="z1"),
    ]
    placed, _ = _run(
        J(1).near("job:11@rack"),
        running=(_filler(10, "y1", 4), _filler(11, "x1", 8)),
        nodes=nodes,
    )
    assert placed[1] == ("x2",)


def test_near_at_nvlink_keeps_to_the_targets_domain() -> None:
    nodes = [make_node(f"g{i}").gpus(4).nvlink_domain(f"d{i // 2}") for i in range(4)]
    placed, _ = _run(
        J(1).near("job:11@nvlink"),
        running=(_filler(10, "g0", 4), _filler(11, "g2", 8)),
        nodes=nodes,
    )
    assert placed[1] == ("g3",)


# -- required apart -------------------------------------------------------------------


def test_apart_at_node_keeps_off_the_targets_node() -> None:
    placed, _ = _run(J(1).apart("job:10@node"), running=(_filler(10, "a-0", 4),))
    assert placed[1] != ("a-0",) and placed[1][0].startswith("a-")


def test_apart_at_leaf_keeps_off_the_targets_whole_leaf() -> None:
    placed, _ = _run(J(1).apart("job:10@leaf"), running=(_filler(10, "a-0", 4),))
    assert placed[1][0].startswith("b-")


def test_apart_from_nothing_running_places_by_best_fit() -> None:
    placed, _ = _run(J(1).apart("name:ghost@leaf"), running=(_filler(10, "a-0", 4),))
    assert placed[1] == ("a-0",)


def test_a_running_jobs_required_apart_keeps_the_job_it_names_away() -> None:
    """Job 10 (apart from any ``web`` at leaf level) runs on a-0, the fullest node; a new
    ``web`` job, with no rule of its own, goes to leaf b."""
    owner = J(10).cpus(4).apart("name:web@leaf").running_on("a-0")
    placed, _ = _run(J(1).name("web"), running=(owner,))
    assert placed[1][0].startswith("b-")


def test_apart_holds_between_two_jobs_placed_in_one_pass() -> None:
    """Job 1 (apart from ``web`` at node level) is placed first; job 2, named web and
    without rules, does not join its node, though best fit would put it there."""
    placed, _ = _run(J(1).cpus(4).apart("name:web@node"), J(2).name("web").priority(-1))
    assert placed[1] != placed[2]


def test_near_and_apart_leave_no_node_waits_with_affinity() -> None:
    placed, why = _run(
        J(1).near("job:10@leaf").apart("job:11@leaf"),
        running=(_filler(10, "a-0", 1), _filler(11, "a-1", 1)),
    )
    assert 1 not in placed and why[1] is R.AFFINITY


# -- preferred ------------------------------------------------------------------------


def test_preferred_near_outweighs_best_fit() -> None:
    placed, _ = _run(
        J(1).near("preferred=job:11@node"),
        running=(_filler(10, "a-0", 6), _filler(11, "b-1", 1)),
    )
    assert placed[1] == ("b-1",)


def test_preferred_near_a_full_target_places_the_job_elsewhere_now() -> None:
    placed, _ = _run(J(1).near("preferred=job:11@node"), running=(J(11).cpus(8).running_on("b-1"),))
    assert 1 in placed and placed[1] != ("b-1",)


def test_preferred_apart_avoids_the_targets_leaf() -> None:
    placed, _ = _run(J(1).apart("preferred=job:10@leaf"), running=(_filler(10, "a-0", 4),))
    assert placed[1][0].startswith("b-")


def test_preferred_near_a_pending_target_does_not_wait() -> None:
    placed, _ = _run(J(1).near("preferred=job:5@node"), J(5).cpus(16).priority(-1))
    assert 1 in placed


# -- explain --------------------------------------------------------------------------


def _explain(snap: ClusterSnapshot) -> str:
    job = snap.pending[0]
    diag = diagnose(Framework(SCHED.profile), PassContext.from_snapshot(snap), job)
    return _detail(job.evolve(reason=R.AFFINITY), diag, [], [])


def test_explain_names_the_rule_a_job_waits_for() -> None:
    snap = cluster().nodes(*_tree()).pending(J(1).near("job:5@node"), J(5).cpus(16)).build()
    assert _explain(snap) == "Affinity: --near=job:5@node: waiting for job 5 to start"


def test_explain_names_the_rule_that_leaves_no_free_node() -> None:
    running = (J(11).cpus(8).running_on("b-0"), J(12).cpus(8).running_on("b-1"))
    snap = cluster().nodes(*_tree()).running(*running).pending(J(1).near("job:11@leaf")).build()
    assert _explain(snap) == (
        "held by its placement rules (0/4 nodes available: 2 insufficient cpu, "
        "2 outside --near=job:11@leaf)"
    )
