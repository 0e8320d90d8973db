"""A job row keeps loading after HAL renamed the reason it stores."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from hal.core.job import Job, JobSpec
from hal.core.states import JobState, PendingReason
from hal.state.store import SqlStateStore


def test_a_node_fail_row_stored_as_nodefail_loads_as_slurm_s_nodedown(tmp_path: Path) -> None:
    """Rows written before NODE_FAIL jobs got Slurm's reason NodeDown say "NodeFail"; a
    server upgraded over such a database must still start."""
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        first = tx.reserve_job_ids(1)
        tx.insert_scripts([(first, "#!/bin/sh\ntrue\n")])
        job = Job(
            id=first,
            spec=JobSpec(user="alice", script="", workdir="/tmp"),
            partition="debug",
            state=JobState.NODE_FAIL,
            reason=PendingReason.NODE_FAIL,
            submit_time=1.0,
            start_time=2.0,
            end_time=3.0,
        )
        tx.insert_jobs([job], [first])
    with store.transaction() as tx:
        stored = tx.conn.execute(text("SELECT reason FROM jobs")).scalar_one()
        tx.conn.execute(text("UPDATE jobs SET reason = 'NodeFail'"))
    [loaded] = store.load_jobs(active_or_ended_after=0.0)
    store.close()
    assert stored == "NodeDown"
    assert loaded.reason is PendingReason.NODE_FAIL and loaded.reason == "NodeDown"
