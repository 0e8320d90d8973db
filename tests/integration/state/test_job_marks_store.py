"""A job's marks (``job.extra``: preempted by, suspended at, requeue ...) are kept in
``jobs.marks``; a database from before them (schema version 4) upgrades with none. That
every store writes and reads them back is the conformance suite's
(``hal.testing.store_conformance``)."""

from __future__ import annotations

from sqlalchemy import text

from hal.state.migrations import STEPS
from hal.state.store import SqlStateStore
from hal.testing import make_job


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
