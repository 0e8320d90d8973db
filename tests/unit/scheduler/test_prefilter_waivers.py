"""A job behind a blocked queue is asked only by the PreFilter plugins that may reject it:
each ``PreFilterWaiver`` says from the job alone that it lets the job through, and the
framework keeps that from pass to pass while the job's spec, partition, admin hold and
array throttle stay as they were (``Framework.pre_filter``).

Two checks: a plugin that says it lets a job through answers SUCCESS or SKIP for it in
every pass tried (holds, begin times past and to come, deadlines, dependencies, array
throttles, reservations, affinity rules, --exclusive=user, topology); and passes over
the same job objects, whose inputs change between them, decide with the waivers exactly
what they decide with every plugin asked: every placement, verdict (message included),
update and reservation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_pass_shortcuts import decisions, with_limits

from hal.bench.sched_pass import NOW as WORKLOAD_NOW
from hal.bench.sched_pass import build_workload
from hal.core.job import Job
from hal.core.priority import PriorityPolicy
from hal.core.reservation import Reservation
from hal.core.states import PartitionState
from hal.scheduler.framework import ClusterSnapshot, CycleState, PassContext
from hal.scheduler.framework.interfaces import PreFilterWaiver
from hal.scheduler.framework.request import placement_key
from hal.scheduler.framework.runtime import Framework
from hal.scheduler.framework.status import Code
from hal.scheduler.plugins import build_scheduler, default_registry
from hal.testing import cluster, make_job

NOW = 1_000_000.0
REGISTRY = default_registry(policy=PriorityPolicy())
WAIVERS = [
    plugin
    for plugin in (REGISTRY.create(name, {}) for name in REGISTRY.names())
    if isinstance(plugin, PreFilterWaiver)
]


def with_deadline(job: Job, deadline: float) -> Job:
    return dataclasses.replace(job, spec=job.spec.with_changes(deadline=deadline))


def in_reservation(job: Job, name: str) -> Job:
    return dataclasses.replace(job, spec=job.spec.with_changes(reservation=name))


def odd_jobs() -> list[Job]:
    """One pending job of each kind a PreFilter plugin may reject, and plain ones."""
    plain = make_job(10).user("alice").cpus(1)
    return [
        plain.build(),
        make_job(11).hold().build(),
        make_job(12).admin_hold().build(),
        make_job(13).begin(NOW + 600).build(),
        make_job(14).begin(NOW - 600).build(),
        with_deadline(make_job(15).limit(3600).build(), NOW + 60),
        with_deadline(make_job(16).limit(60).build(), NOW + 3600),
        make_job(17).depends("afterok:1").build(),
        make_job(18).array(50, 1, max_running=1).build(),
        make_job(19).array(60, 1).build(),
        in_reservation(make_job(20).user("alice").limit(60).build(), "maint"),
        in_reservation(make_job(21).user("bob").limit(60).build(), "maint"),
        in_reservation(make_job(22).limit(60).build(), "gone"),
        make_job(23).near("name:db").build(),
        make_job(24).near("job:999").build(),
        make_job(25).apart("name:db").build(),
        make_job(26).exclusive_user().build(),
        make_job(27).name("x").build(),
        make_job(28).gpus(2).topology("nvlink", required=True).build(),
        make_job(29).topology("leaf", required=True).build(),
        make_job(30).partition("closed").build(),
    ]


def odd_snapshots() -> list[ClusterSnapshot]:
    """The odd jobs in passes that differ in what the plugins read besides the job."""
    running = (
        make_job(1).user("bob").exclusive_user().running_on("n0001").build(),
        make_job(2).apart("name:x").running_on("n0002").build(),
        make_job(3).name("db").running_on("n0003").build(),
        make_job(4).array(50, 0, max_running=1).running_on("n0003").build(),
    )
    maint = Reservation("maint", NOW - 10, NOW + 3600, ("n0004",), users=("alice",))
    out = []
    for now in (NOW, NOW + 7200):
        for held in (running, ()):
            base = (
                cluster(now)
                .uniform_nodes(4, cpus=4)
                .partition("batch", "n0001", "n0002", "n0003", "n0004", default=True)
                .partition("closed", "n0004", state=PartitionState.DOWN)
                .pending(*odd_jobs())
                .running(*held)
                .related(*held)
                .build()
            )
            out.append(base)
            out.append(dataclasses.replace(base, reservations=(maint,)))
    return out


def test_a_plugin_that_lets_a_job_through_never_rejects_it() -> None:
    assert {p.name for p in WAIVERS} >= {"hold", "dependency", "reservation", "affinity"}
    let_through = {p.name: 0 for p in WAIVERS}
    kept_asking = {p.name: 0 for p in WAIVERS}
    for snap in odd_snapshots():
        ctx = PassContext.from_snapshot(snap)
        for plugin in WAIVERS:
            for job in snap.pending:
                if not plugin.lets_through(job):
                    kept_asking[plugin.name] += 1
                    continue
                let_through[plugin.name] += 1
                state = CycleState()
                st = plugin.pre_filter(ctx, state, job)  # type: ignore[attr-defined]
                assert st.code in (Code.SUCCESS, Code.SKIP), (plugin.name, job.id, st)
    assert all(let_through.values()), let_through
    # every plugin but exclusiveuser (whose PreFilter never rejects) asks about some job
    assert all(n for name, n in kept_asking.items() if name != "exclusiveuser"), kept_asking


def changing_passes() -> list[ClusterSnapshot]:
    """The same pending job objects pass after pass while the rest changes: the queue
    as built, a partition down, the clock past the begin times, the nodes emptied, the
    queue as built again; then the odd jobs' passes."""
    workload = build_workload(1500, 120, 7)
    first = workload.snapshot()
    down = tuple(
        dataclasses.replace(p, state=PartitionState.DOWN) if p.name == "debug" else p
        for p in first.partitions
    )
    return [
        first,
        dataclasses.replace(first, revision=2, partitions=down),
        dataclasses.replace(first, revision=3, now=WORKLOAD_NOW + 2 * 86_400),
        dataclasses.replace(first, revision=4, running=()),
        dataclasses.replace(first, revision=5),
        *odd_snapshots(),
    ]


def every_plugin_asked(self: Framework, job: Job, inputs: Any) -> tuple[Any, ...]:
    """``Framework._own_calls`` without waivers: every PreFilter plugin asked."""
    return inputs, self._pre_filter_calls, placement_key(job)


def test_passes_over_kept_jobs_decide_what_asking_every_plugin_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes = changing_passes()

    def run() -> list[list[dict[str, Any]]]:
        out = []
        for sched in (build_scheduler(), with_limits()):  # one scheduler for every pass
            out.append([decisions(sched.run_pass(snap)) for snap in passes])
        return out

    waived = run()
    # the queue blocks: some jobs wait behind it, and some of them for reasons of their own
    assert any(st.plugin == "queue" for st in waived[0][0]["statuses"].values())
    assert any(st.plugin == "hold" for st in waived[0][0]["statuses"].values())
    monkeypatch.setattr(Framework, "_own_calls", every_plugin_asked)
    assert run() == waived


@pytest.mark.parametrize("admin", [False, True])
def test_a_changed_job_is_asked_again(admin: bool) -> None:
    """The same id held since (by its user: another spec; by an admin: the same spec):
    what was kept of it is not used."""
    sched = build_scheduler()
    blocker = make_job(1).cpus(4).running_on("n0001").build()
    waiting = make_job(2).cpus(1).priority(1).build()
    snap = cluster(NOW).uniform_nodes(1, cpus=4).running(blocker).build()
    busy = make_job(3).cpus(4).priority(5).build()  # does not fit: the queue blocks
    first = dataclasses.replace(snap, pending=(busy, waiting))
    assert sched.run_pass(first).statuses[2].plugin == "queue"
    if admin:
        held = dataclasses.replace(waiting, held_by_admin=True)
    else:
        held = dataclasses.replace(waiting, spec=waiting.spec.with_changes(hold=True))
    second = dataclasses.replace(snap, pending=(busy, held))
    assert sched.run_pass(second).statuses[2].plugin == "hold"


def test_bounded_passes_between_keep_what_the_full_ones_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass that looks at the first ``depth`` jobs adds to what is kept and lets
    nothing go: the next full pass asks no waiver again of the jobs it did not look at
    (the server's full passes come after dozens of bounded ones), and decides what
    asking every plugin decides."""
    passes = changing_passes()

    def run() -> list[list[dict[str, Any]]]:
        out = []
        for sched in (build_scheduler(), with_limits()):
            full = []
            for snap in passes:
                sched.run_pass(snap, depth=1)
                full.append(decisions(sched.run_pass(snap)))
            out.append(full)
        return out

    waived = run()
    asked: list[int] = []
    own_calls = Framework._own_calls

    def counted(self: Framework, job: Job, inputs: Any) -> tuple[Any, ...]:
        asked.append(job.id)
        return own_calls(self, job, inputs)

    monkeypatch.setattr(Framework, "_own_calls", counted)
    sched = build_scheduler()
    snap = passes[0]
    sched.run_pass(snap)
    assert len(asked) > 1  # jobs waited behind the blocked queue
    sched.run_pass(snap, depth=1)
    sched.run_pass(snap, depth=1)  # (they may ask jobs the full pass did not)
    before = len(asked)
    sched.run_pass(snap)
    assert len(asked) == before  # nothing asked again: the same job objects
    monkeypatch.setattr(Framework, "_own_calls", every_plugin_asked)
    assert run() == waived


class _BrokenWaiver:
    """A PreFilter plugin whose ``lets_through`` raises."""

    name = "broken"

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Any:
        raise AssertionError("not asked: its waiver raised first")

    def lets_through(self, job: Job) -> bool:
        raise ValueError("no answer")


def test_a_waiver_that_raises_fails_that_job_naming_its_plugin() -> None:
    """As a PreFilter plugin that raises: the job gets an error verdict naming the
    plugin, and the pass goes on."""
    profile = build_scheduler().profile
    broken = dataclasses.replace(profile, pre_filter=(*profile.pre_filter, _BrokenWaiver()))
    framework = Framework(broken)
    job = make_job(2).build()
    ctx = PassContext.from_snapshot(cluster(NOW).uniform_nodes(1, cpus=1).pending(job).build())
    framework.new_pass()
    out = framework.pre_filter(ctx, job)
    assert out is not None and out.status.code is Code.ERROR
    assert (out.status.plugin, out.status.message) == ("broken", "ValueError: no answer")
