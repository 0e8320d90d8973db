"""A standby server reads the jobs ahead and keeps them decoded (``JobRowMemo``), so its
takeover decodes only the rows that changed since. What the takeover loads must be what
a cold read gives: a changed row decoded again, a new one added, a purged one gone."""

from __future__ import annotations

import dataclasses

from sqlalchemy import text

from hal.core.states import JobState
from hal.state.codec import JobRowMemo
from hal.state.store import SqlStateStore
from hal.testing import make_job


def test_a_read_through_the_memo_equals_a_cold_read_after_changes(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    jobs = [make_job(i).array(1, i - 1).build() for i in (1, 2, 3)]
    with store.transaction() as tx:
        tx.insert_scripts([(1, jobs[0].spec.script)])
        tx.insert_jobs(jobs, [1, 1, 1])
    store.job_memo = JobRowMemo()
    ahead = store.load_jobs(active_or_ended_after=0.0)  # the standby's preload
    assert store.job_memo.hits == 0

    # meanwhile the leader starts job 2, submits job 4 and purges job 3
    with store.transaction() as tx:
        tx.update_jobs([dataclasses.replace(ahead[1], state=JobState.RUNNING, start_time=5.0)])
        tx.insert_jobs([make_job(4).array(1, 3).build()], [1])
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = 3"))

    taken = store.load_jobs(active_or_ended_after=0.0)  # the takeover's load
    assert store.job_memo.hits == 1  # job 1 only: unchanged
    store.job_memo = None
    cold = store.load_jobs(active_or_ended_after=0.0)
    store.close()
    assert taken == cold
    assert [(j.id, j.state) for j in taken] == [
        (1, JobState.PENDING),
        (2, JobState.RUNNING),
        (4, JobState.PENDING),
    ]
    assert taken[0] is ahead[0]  # reused, not decoded again
    assert taken[2].spec is taken[0].spec  # an array's elements share one spec still


def test_on_postgresql_a_takeover_fetches_only_the_rows_changed_since_the_preload(
    pg_url: str,
) -> None:
    """The standby keeps each job with its row's version (``xmin``): the takeover's read
    asks for the versions and fetches and decodes only the rows written since its last
    read ahead, in one snapshot; what it gives is what a cold read gives."""
    store = SqlStateStore(pg_url)
    store.migrate()
    jobs = [make_job(i).array(1, i - 1).build() for i in range(1, 41)]
    with store.transaction() as tx:
        tx.insert_scripts([(1, jobs[0].spec.script)])
        tx.insert_jobs(jobs, [1] * len(jobs))
    store.job_memo = JobRowMemo()
    ahead = store.load_jobs(active_or_ended_after=0.0)
    again = store.load_jobs(active_or_ended_after=0.0)  # a second preload: nothing new
    assert store.job_memo.hits == 40
    assert all(a is b for a, b in zip(ahead, again, strict=True))

    # the leader starts job 7, writes job 8 again unchanged, submits 41, purges 40
    with store.transaction() as tx:
        tx.update_jobs([dataclasses.replace(ahead[6], state=JobState.RUNNING, start_time=5.0)])
        tx.update_jobs([ahead[7]])
        tx.insert_jobs([make_job(41).array(1, 40).build()], [1])
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = 40"))

    store.job_memo.hits = 0
    taken = store.load_jobs(active_or_ended_after=0.0)
    assert store.job_memo.hits == 37  # 40 less the started, the rewritten, the purged
    store.job_memo = None
    cold = store.load_jobs(active_or_ended_after=0.0)
    store.close()
    assert taken == cold
    assert [j.id for j in taken] == [*range(1, 40), 41]
    assert taken[6].state is JobState.RUNNING and taken[6] is not ahead[6]
    assert taken[0] is ahead[0]
    assert taken[-1].spec is taken[0].spec  # the new element shares its array's spec
