"""``AvailabilityProfile`` against a naive model of the same timeline.

The profile stores change points, not rows × nodes arrays; the model here recomputes
every row of every node from the releases and reservations made so far. Random
clusters, running jobs, reservations (now and later, some past the horizon) and queries
(windows, the CPU screen, start rows) must agree exactly, since backfill decisions
depend on every value.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from hal.core.job import Allocation, Job, JobSpec
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework import availability
from hal.scheduler.framework.availability import AvailabilityProfile, round_up
from hal.scheduler.framework.node_table import AllocationRows, NodeTable
from hal.scheduler.framework.request import NodeRequest

NOW = 1000.0


class Model:
    """Rows recomputed from scratch: base + releases up to the row − reservations
    covering it."""

    def __init__(self, table: NodeTable, resolution: float, horizon: float) -> None:
        self.base = np.stack(
            (table.free_cpus, table.free_memory, table.free_gpus, table.jobs_on, table.exclusive_on)
        ).astype(np.int64)
        self.cap_memory = table.cap_memory
        self.resolution = resolution
        self.horizon = horizon
        # (from, until, rows, delta (5, n)) added to every row with from <= t < until
        self.changes: list[tuple[float, float, AllocationRows, np.ndarray]] = []
        self.instants: set[float] = set()

    @staticmethod
    def delta(ar: AllocationRows, exclusive: bool, sign: int) -> np.ndarray:
        excl = np.full(len(ar.rows), -sign if exclusive else 0)
        jobs = np.full(len(ar.rows), -sign)
        return np.stack((sign * ar.cpus, sign * ar.memory, sign * ar.gpus, jobs, excl))

    def release(self, end: float, ar: AllocationRows, exclusive: bool) -> None:
        t = round_up(max(end, NOW + max(self.resolution, 1.0)), self.resolution)
        if t < self.horizon:
            self.changes.append((t, math.inf, ar, self.delta(ar, exclusive, 1)))
            self.instants.add(t)

    def reserve(self, start: float, end: float, ar: AllocationRows, exclusive: bool) -> None:
        end = round_up(end, self.resolution)
        until = math.inf if end >= self.horizon else end
        self.changes.append((start, until, ar, self.delta(ar, exclusive, -1)))
        self.instants |= {start} | ({end} if end < self.horizon else set())

    def times(self) -> list[float]:
        return sorted(t for t in self.instants | {NOW} if t >= NOW)

    def row(self, t: float) -> np.ndarray:
        level = self.base.copy()
        for start, until, ar, d in self.changes:
            if start <= t < until:
                np.add.at(level.T, ar.rows, d.T)
        return level

    def window(self, times: list[float], first: int, end: float) -> np.ndarray:
        last = max(int(np.searchsorted(times, end, side="left")) - 1, first, 0)
        rows = np.stack([self.row(t) for t in times[first : last + 1]], axis=1)
        return np.concatenate((rows[:3].min(axis=1), rows[3:].max(axis=1)))

    def fits(self, level: np.ndarray, req: NodeRequest) -> np.ndarray:
        ok = level[0] >= req.cpus
        if req.memory_bytes is None:
            ok &= level[1] >= self.cap_memory
        elif req.memory_bytes:
            ok &= level[1] >= req.memory_bytes
        if req.gpus:
            ok &= level[2] >= req.gpus
        return ok & ((level[3] == 0) if req.exclusive else (level[4] == 0))

    def start_rows(
        self, times: list[float], req: NodeRequest, mask: np.ndarray, dur: float
    ) -> list[int]:
        found = []
        for k, t in enumerate(times):
            last = max(int(np.searchsorted(times, t + dur, side="left")) - 1, k)
            ok = mask.copy()
            for s in times[k : last + 1]:
                ok &= self.fits(self.row(s), req)
            if np.count_nonzero(ok) >= req.n_nodes:
                found.append(k)
        return found


def allocation(rng: random.Random, names: list[str], cpus: int) -> Allocation:
    picked = rng.sample(names, rng.randint(1, min(3, len(names))))
    per = tuple(
        ResourceVector(rng.randint(0, cpus), rng.randint(0, 4) * GiB, rng.randint(0, 1))
        for _ in picked
    )
    return Allocation(tuple(picked), per)


@pytest.mark.parametrize("way", ["rows-x-nodes", "change-points", "first-fits"])
@pytest.mark.parametrize("seed", range(60))
def test_profile_agrees_with_the_naive_timeline(
    seed: int, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every window (those from now also asked again after a reservation), CPU screen
    (also as a step function of the window's end) and
    start-row screen equals the model's, after every reservation (now or later,
    exclusive or not, within or past the horizon), with the start-row screen done each
    way (materialised rows, change points only, or, while no reservation starts later
    than now, each node from the first row it fits)."""
    monkeypatch.setattr(availability, "_DENSE_CELLS", 1 << 30 if way == "rows-x-nodes" else 0)
    monkeypatch.setattr(availability, "_RISING", way == "first-fits")
    rng = random.Random(seed)
    n = rng.randint(2, 7)
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 2), partitions=("p",)) for i in range(n)]
    names = [x.name for x in nodes]
    table = NodeTable(nodes, [Partition("p")])
    resolution = rng.choice((1.0, 7.0, 60.0))
    horizon = rng.choice((math.inf, NOW + 300.0))
    releases = []
    for _ in range(rng.randint(0, 8)):
        alloc = allocation(rng, names, 3)
        exclusive = rng.random() < 0.2
        table.take(alloc, exclusive=exclusive)
        releases.append((NOW + rng.uniform(-20, 400), table.rows_of(alloc), exclusive))
    model = Model(table, resolution, horizon)
    for end, ar, exclusive in releases:
        model.release(end, ar, exclusive)
    profile = AvailabilityProfile(table, NOW, releases, resolution=resolution, horizon=horizon)
    mask = np.array([rng.random() < 0.8 for _ in names])

    def same_window_from_now(end: float) -> None:
        got = profile.window(0, end)  # kept from one ask to the next until a reserve
        want = model.window(list(profile.times), 0, end)
        arrays = (got.free_cpus, got.free_memory, got.free_gpus, got.jobs_on, got.exclusive_on)
        assert [a.tolist() for a in arrays] == [w.tolist() for w in want], end

    for _ in range(12):
        times = list(profile.times)
        assert times == model.times()
        soon = NOW + rng.uniform(0, 400)
        same_window_from_now(soon)
        first = rng.randrange(len(times))
        end = times[first] + rng.uniform(0, 300)
        got = profile.window(first, end)
        want = model.window(times, first, end)
        for i, arr in enumerate(
            (got.free_cpus, got.free_memory, got.free_gpus, got.jobs_on, got.exclusive_on)
        ):
            assert arr.tolist() == want[i].tolist(), (i, first, end)
        want_cpus = int(model.window(times, 0, end)[0][mask].sum())
        assert profile.free_cpus_from_now(end, mask, "p") == want_cpus
        # the same as a step function of the end, at the rows' own instants too
        instants, values = profile.free_cpus_steps(mask, "p")
        for t in (end, *times, *(x + 0.5 for x in times)):
            at = int(values[np.searchsorted(instants, t)])
            assert at == profile.free_cpus_from_now(t, mask, "p"), t
        mem = rng.choice((None, 0, 2 * GiB))
        req = NodeRequest(
            rng.randint(1, 2), rng.randint(1, 6), mem, rng.randint(0, 1), rng.random() < 0.2
        )
        dur = rng.uniform(0, 200)
        assert profile.start_rows(req, mask, dur) == model.start_rows(times, req, mask, dur)
        # one more reservation, now or at a row
        alloc = allocation(rng, names, 2)
        ar = table.rows_of(alloc)
        start = rng.choice(times)
        stop = start + rng.choice((0.0, rng.uniform(1, 250)))
        exclusive = rng.random() < 0.2
        profile.reserve(start, stop, ar, exclusive)
        model.reserve(start, stop, ar, exclusive)
        same_window_from_now(soon)


@pytest.mark.parametrize("together", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_the_release_ledger_gathers_what_the_releases_give(
    seed: int, together: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over passes where jobs start, end and start again (another allocation), with
    compaction and a new node list now and then: the rows and release events gathered
    from the ledger's slots equal those built from the releases, in the same order,
    whether the slots are asked job by job (``slot``) or all at once (``slots``, as for
    a pass's placements; some on a node that left the cluster)."""
    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr(availability, "_LEDGER_SLACK", 0)  # compact often
    ledger = availability.ReleaseLedger()
    n = rng.randint(2, 7)
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 2), partitions=("p",)) for i in range(n)]
    names = [x.name for x in nodes]
    table = NodeTable(nodes, [Partition("p")])
    running: dict[int, tuple[Allocation, bool, float]] = {}
    next_id = 0
    for _ in range(30):
        if rng.random() < 0.1:
            table = NodeTable(nodes, [Partition("p")])  # another node list object
        for jid in [j for j in running if rng.random() < 0.3]:
            del running[jid]
        for _ in range(rng.randint(0, 4)):
            if running and rng.random() < 0.2:  # the same job, another allocation
                jid = rng.choice(list(running))
            else:
                jid, next_id = next_id, next_id + 1
            alloc = allocation(rng, names, 3)
            if together and rng.random() < 0.1:
                alloc = Allocation(("gone",), (ResourceVector(1, GiB),))
            running[jid] = (alloc, rng.random() < 0.2, rng.uniform(-20, 400))
        resolution = rng.choice((1.0, 7.0, 60.0, 0.0))
        horizon = rng.choice((math.inf, NOW + 300.0))
        releases = []
        ends, firsts, counts, exclusive = [], [], [], []
        placed = []
        for jid, (alloc, excl, after) in running.items():
            releases.append((NOW + after, table.rows_of(alloc), excl))
            if together:
                job = Job(id=jid, spec=JobSpec(user="u", script=""), partition="p", submit_time=0)
                placed.append((job, alloc))
            else:
                first, count = ledger.slot(table, jid, alloc)
                firsts.append(first)
                counts.append(count)
            ends.append(NOW + after)
            exclusive.append(excl)
        if together:
            firsts, counts = ledger.slots(table, placed)
            assert counts == [len(table.rows_of(a).rows) for _, a in placed]
        times, events = ledger.gather(NOW, ends, firsts, counts, exclusive, resolution, horizon)
        ledger.keep_only(set(running))
        assert len(ledger) == len(running)
        want_times, want = availability._gather_releases(NOW, releases, resolution, horizon)
        assert times == want_times
        assert all(type(t) is float for t in times)
        for got_array, want_array in zip(events.view(), want.view(), strict=True):
            assert np.array_equal(got_array, want_array)


@pytest.mark.parametrize("together", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_held_slots_looked_up_by_job_object_stay_right(
    seed: int, together: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running jobs kept pass after pass (the same object), replaced by a new object, or
    by one holding another allocation, with compaction and a new node list now and then:
    ``held_slot`` (or ``held_slots`` for all of them at once, as a pass asks) gives the
    slots and exclusive flag of what ``holding`` says it holds, and those slots hold its
    rows."""
    rng = random.Random(seed)
    monkeypatch.setattr(availability, "_LEDGER_SLACK", 0)  # compact often
    ledger = availability.ReleaseLedger()
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 2), partitions=("p",)) for i in range(5)]
    names = [x.name for x in nodes]
    table = NodeTable(nodes, [Partition("p")])
    spec = JobSpec(user="u", script="")
    running: dict[int, Job] = {}
    for step in range(30):
        if rng.random() < 0.1:
            table = NodeTable(nodes, [Partition("p")])
        for jid in [j for j in running if rng.random() < 0.3]:
            del running[jid]
        for jid in list(running):
            if rng.random() < 0.2:  # a new object for the same job
                running[jid] = running[jid].evolve(reason=PendingReason.NONE)
        for k in range(rng.randint(0, 3)):
            jid = 100 * step + k
            alloc = allocation(rng, names, 3)
            exclusive = rng.random() < 0.3
            running[jid] = Job(
                id=jid,
                spec=spec.with_changes(exclusive=exclusive),
                partition="p",
                submit_time=0.0,
                state=JobState.RUNNING,
                start_time=NOW,
                allocation=alloc,
            )
        jobs = list(running.values())
        held = ledger.held_slots(table, jobs) if together else []
        for i, job in enumerate(jobs):
            found = held[i] if together else ledger.held_slot(table, job)
            assert found is not None
            first, count, exclusive = found
            assert exclusive is job.spec.exclusive
            assert job.allocation is not None
            assert (first, count) == ledger.slot(table, job.id, job.allocation)
            rows = table.rows_of(job.allocation).rows
            assert np.array_equal(ledger._node[first : first + count], rows)
        ledger.keep_only(set(running))


def test_a_table_built_anew_on_the_same_nodes_keeps_the_slots() -> None:
    """The server builds its table (and its list of names) every pass: on the same nodes
    in the same order the ledger keeps the slots it wrote (``same_nodes``); on another
    order it starts over, and the slots hold the new table's rows."""
    ledger = availability.ReleaseLedger()
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 2), partitions=("p",)) for i in range(5)]
    alloc = Allocation(("n1", "n3"), (ResourceVector(2, GiB), ResourceVector(4, 2 * GiB)))
    job = Job(
        id=7,
        spec=JobSpec(user="u", script=""),
        partition="p",
        submit_time=0.0,
        state=JobState.RUNNING,
        start_time=NOW,
        allocation=alloc,
    )
    first = ledger.held_slot(NodeTable(nodes, [Partition("p")]), job)
    epoch = ledger.epoch
    again = NodeTable(nodes, [Partition("p")])
    ledger.same_nodes(again)
    assert ledger.held_slot(again, job) == first and ledger.epoch == epoch
    other = NodeTable(nodes[::-1], [Partition("p")])
    ledger.same_nodes(other)
    found = ledger.held_slot(other, job)
    assert found is not None and ledger.epoch > epoch
    slot, count, _ = found
    assert np.array_equal(ledger._node[slot : slot + count], other.rows_of(alloc).rows)


@pytest.mark.parametrize("seed", range(40))
def test_the_start_rows_memo_answers_as_a_fresh_screen(seed: int) -> None:
    """Profiles built pass after pass, often on exactly the state of the pass before
    (later ``now``, same releases) and often not: ``start_rows`` with the memo kept
    across them equals ``start_rows`` without one, before and after a reservation."""
    rng = random.Random(seed)
    memo = availability.StartRowsMemo()
    n = rng.randint(2, 7)
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 2), partitions=("p",)) for i in range(n)]
    names = [x.name for x in nodes]
    table = NodeTable(nodes, [Partition("p")])
    releases: list[tuple[float, AllocationRows, bool]] = []
    now = NOW
    hits = 0
    mask, req, dur = np.ones(n, dtype=np.bool_), NodeRequest(1, 2, None, 0, False), 30.0
    for _ in range(40):
        now += rng.choice((0.0, 0.5))
        if rng.random() < 0.4:  # something changed: a job starts or ends
            if releases and rng.random() < 0.5:
                _, ar, exclusive = releases.pop(rng.randrange(len(releases)))
                table.release(ar.allocation, exclusive=exclusive)
            else:
                alloc = allocation(rng, names, 2)
                exclusive = rng.random() < 0.2
                table.take(alloc, exclusive=exclusive)
                releases.append((NOW + rng.uniform(5, 400), table.rows_of(alloc), exclusive))
        kept = AvailabilityProfile(table, now, releases, memo=memo)
        fresh = AvailabilityProfile(table, now, releases)
        if rng.random() < 0.3:  # another head job, or other nodes
            mask = np.array([rng.random() < 0.9 for _ in names])
            req = NodeRequest(rng.randint(1, 2), rng.choice((2, 4)), None, 0, False)
            dur = rng.choice((30.0, 120.0))
        hits += memo.get(kept, req, mask, dur) is not None
        assert kept.start_rows(req, mask, dur) == fresh.start_rows(req, mask, dur)
        start = rng.choice(kept.times)
        ar = table.rows_of(allocation(rng, names, 1))
        for profile in (kept, fresh):
            profile.reserve(start, start + 50.0, ar, False)
        assert kept.start_rows(req, mask, dur) == fresh.start_rows(req, mask, dur)
    assert hits


def test_a_batch_written_to_the_ledger_takes_a_job_twice_and_keeps_nothing_if_it_raised() -> None:
    """``slots`` with a job twice (the same allocation: one slot; another: the later one
    holds) gives the slots ``slot`` would; a batch that raises partway (an allocation
    whose node cannot be read) records none of it, so no later job shares its slots."""
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 2), partitions=("p",)) for i in range(3)]
    table = NodeTable(nodes, [Partition("p")])
    spec = JobSpec(user="u", script="")
    one = Allocation(("n0",), (ResourceVector(2, GiB),))
    two = Allocation(("n1", "n2"), (ResourceVector(1, GiB), ResourceVector(1, GiB)))

    def job(jid: int) -> Job:
        return Job(id=jid, spec=spec, partition="p", submit_time=0)

    ledger = availability.ReleaseLedger()
    firsts, counts = ledger.slots(table, [(job(1), one), (job(1), one), (job(2), one)])
    assert (firsts, counts) == ([0, 0, 1], [1, 1, 1]) and ledger._live == 2
    firsts, counts = ledger.slots(table, [(job(3), one), (job(3), two)])
    assert counts == [1, 2] and ledger._live == 4  # (job 3's first slot let go)
    assert ledger.slot(table, 3, two) == (firsts[1], 2)
    assert np.array_equal(ledger._node[firsts[1] : firsts[1] + 2], table.rows_of(two).rows)
    broken = Allocation((), (ResourceVector(1, GiB),))  # (one node's amounts, no name)
    size, live, kept = ledger._size, ledger._live, dict(ledger._jobs)
    with pytest.raises(IndexError):
        ledger.slots(table, [(job(4), one), (job(5), broken)])
    assert (ledger._size, ledger._live, ledger._jobs) == (size, live, kept)
    assert ledger.slot(table, 6, two) == (size, 2)  # (the slots the batch left free)
    assert ledger.slot(table, 4, one) == (size + 2, 1)
