"""Finished jobs' memory peak and CPU time (and its user and system parts): many stored
in one statement, each on its own row, and read back with the job."""

from __future__ import annotations

from pathlib import Path

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.state.store import SqlStateStore


def test_usage_of_many_jobs_is_stored_per_job(tmp_path: Path) -> None:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        first = tx.reserve_job_ids(3)
        tx.insert_scripts([(first, "#!/bin/sh\ntrue\n")])
        jobs = [
            Job(
                id=first + i,
                spec=JobSpec(user="alice", script="", workdir="/tmp"),
                partition="debug",
                state=JobState.COMPLETED,
                submit_time=1.0,
                start_time=2.0,
                end_time=3.0,
            )
            for i in range(3)
        ]
        tx.insert_jobs(jobs, [first] * 3)
    with store.transaction() as tx:
        tx.record_usage(
            [(first, 1 << 20, 0.5, 0.375, 0.125), (first + 2, 3 << 20, 1.25, None, None)]
        )
        tx.record_usage([])  # a sync without finished jobs
    loaded = {j.id: j.extra for j in store.load_jobs(active_or_ended_after=0.0)}
    store.close()
    assert (loaded[first]["max_rss"], loaded[first]["cpu_seconds"]) == (str(1 << 20), "0.5")
    assert (loaded[first + 1]["max_rss"], loaded[first + 1]["cpu_seconds"]) == ("0", "0.0")
    assert loaded[first + 2]["max_rss"] == str(3 << 20)
    assert loaded[first + 2]["cpu_seconds"] == "1.25"
    # the user and system parts, where said (an older agent's: not known)
    assert (loaded[first]["user_cpu_seconds"], loaded[first]["system_cpu_seconds"]) == (
        "0.375",
        "0.125",
    )
    assert "user_cpu_seconds" not in loaded[first + 2]
    assert "user_cpu_seconds" not in loaded[first + 1]
