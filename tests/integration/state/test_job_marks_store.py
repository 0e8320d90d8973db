"""A job's marks (``job.extra``: preempted by, suspended at, requeue ...) survive a
server restart on SQLite and PostgreSQL, so a restarted server still resumes a job
suspended for a preemptor; a database from before them upgrades with none."""

from __future__ import annotations

from sqlalchemy import text

from hal.state.migrations import STEPS
from hal.state.store import SqlStateStore
from hal.testing import make_job

MARKS = {"preempted_by": "2", "preempt_mode": "suspend", "suspended_at": "1000.5"}


def test_marks_are_written_updated_and_reloaded(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    job = make_job(1).running_on("n1", start=10.0).build().evolve(extra={"requeue": "1"})
    with store.transaction() as tx:
        tx.insert_scripts([(1, job.spec.script)])
        tx.insert_jobs([job], [1])
    with store.transaction() as tx:
        tx.update_jobs([job.evolve(extra=MARKS)])
    (loaded,) = store.load_jobs(active_or_ended_after=0.0)
    store.close()
    # the columns' own keys come from the columns, the rest from the marks
    assert loaded.extra == {**MARKS, "script_id": "1", "max_rss": "0", "cpu_seconds": "0.0"}


def test_migration_adds_the_marks_column(db_url: str) -> None:
    """A database at schema version 4 gains ``jobs.marks``; old rows have none."""
    store = SqlStateStore(db_url)
    store.migrate()
    job = make_job(1).build()
    with store.transaction() as tx:
        tx.insert_scripts([(1, job.spec.script)])
        tx.insert_jobs([job], [1])
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE jobs DROP COLUMN marks"))
        conn.execute(text("UPDATE hal_meta SET value = 4 WHERE key = 'schema_version'"))
    store.close()
    again = SqlStateStore(db_url)
    assert again.migrate() == len(STEPS) >= 5
    (old,) = again.load_jobs(active_or_ended_after=0.0)
    again.close()
    assert set(old.extra) == {"script_id", "max_rss", "cpu_seconds"}
