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
