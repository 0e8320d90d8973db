"""A plan's and a sync's writes, one statement per table on PostgreSQL (its rows as one
JSON array), read back as the statements of one row each wrote them, on real SQLite and
PostgreSQL: events get ids ascending in the order given, with what each said; usage
and earlier runs given twice are written as their last row says."""

from __future__ import annotations

from hal.core.states import JobState
from hal.state.codec import SYSTEM_CPU, USER_CPU
from hal.state.rows import RunRow
from hal.state.store import EventRow, SqlStateStore
from hal.testing import make_job


def test_many_events_get_ids_in_the_order_given_with_what_each_said(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    rows = [
        EventRow(
            1000.0 + (i * 7919) % 301 / 4,  # times out of order: ids follow the list
            "job.started" if i % 3 else "node.down",
            job_id=None if i % 5 == 0 else 10_000 - i,
            node=f"nœud{i}" if i % 2 else None,
            state="RUNNING" if i % 4 else None,
            data={"nodes": [f"n{i}"], "why": 'a "quoted" reason'} if i % 6 else None,
        )
        for i in range(300)
    ]
    with store.transaction() as tx:
        tx.add_events(rows[:1])
    with store.transaction() as tx:
        tx.add_events(rows[1:])
        given = tx.stored_events
    back = store.events_after(0, limit=1000)
    assert [e.id for e in given] == sorted({e.id for e in given})
    assert given == back[1:]
    assert [(e.time, e.kind, e.job_id, e.node, e.state) for e in back] == [
        (r.time, r.kind, r.job_id, r.node, r.state) for r in rows
    ]
    assert [e.data for e in back] == [r.data or {} for r in rows]
    store.close()


def test_usage_and_runs_given_twice_are_written_as_their_last_row_says(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    jobs = [make_job(i).running_on("n1", start=1.0).build() for i in (1, 2, 3)]
    with store.transaction() as tx:
        tx.insert_scripts([(j.id, j.spec.script) for j in jobs])
        tx.insert_jobs(jobs, [j.id for j in jobs])
    with store.transaction() as tx:
        tx.update_jobs([j.evolve(state=JobState.COMPLETED, end_time=9.0) for j in jobs])
        tx.record_usage([(1, 5, 1.5, None, None), (2, 7, 2.5, 2.0, 0.5), (1, 6, 3.0, 2.5, 0.5)])
        tx.add_runs([run(1, 0, "REQUEUED"), run(2, 0, "NODE_FAIL"), run(1, 0, "PREEMPTED")])
    with store.transaction() as tx:
        tx.add_runs([run(2, 0, "REQUEUED"), run(2, 1, "PREEMPTED")])
    found = {j.id: j.extra for j in store.load_jobs(active_or_ended_after=0.0)}
    used = {
        i: (e["max_rss"], e["cpu_seconds"], e.get(USER_CPU), e.get(SYSTEM_CPU))
        for i, e in found.items()
    }
    assert used == {
        1: ("6", "3.0", "2.5", "0.5"),
        2: ("7", "2.5", "2.0", "0.5"),
        3: ("0", "0.0", None, None),  # none reported: as inserted
    }
    runs = [(r.job_id, r.attempt, r.state) for r in store.runs_of([1, 2, 3])]
    assert runs == [(1, 0, "PREEMPTED"), (2, 0, "REQUEUED"), (2, 1, "PREEMPTED")]
    store.close()


def run(job_id: int, attempt: int, state: str) -> RunRow:
    return RunRow(
        job_id, attempt, state, 0, 0, "batch", 1.0, 2.0, 3.0, 4.0, '{"nodes":["n1"]}', 10, 0.5
    )
