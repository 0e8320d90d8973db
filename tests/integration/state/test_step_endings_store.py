"""How a step ended, as accounting keeps it, on real SQLite and PostgreSQL (migration 23;
docs/slurm-checks.md, Slurm 22.05.8 with slurmdbd): a step scancel'd alone keeps who did
it (``CANCELLED by UID``), across a server restart while it ends; one ended at its own
time limit is ``TIMEOUT``; one its job's end ended is marked so (``with_job``: not in the
job's DerivedExitCode)."""

from __future__ import annotations

import asyncio
import signal

from test_step_usage_store import ANN, loaded, two_node_job

from hal.slurm.steps import StepRequest
from hal.state import commands
from hal.state.steps import StepTable
from hal.state.store import DatabaseUnavailable
from hal.wire.agent import StepEnd


def end(job_id: int, step_id: int, *, timed_out: bool = False) -> StepEnd:
    return StepEnd(
        job_id=job_id, step_id=step_id, exit_code=143, exit_signal=15, timed_out=timed_out
    )


def test_how_steps_ended_is_kept(db_url: str) -> None:
    async def main() -> None:
        async with loaded(db_url) as cluster:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            one = StepRequest(1, 1, nodelist=("n1",), exact=True)
            cancelled = await table.create(job_id, ANN, one, ["a"], {})
            await table.cancel(cancelled, None, "ann")
            restarted = StepTable(cluster)  # the server restarts before the step ends
            assert await restarted.restore() == 1
            kill = StepEnd(job_id=job_id, step_id=0, exit_code=137, exit_signal=signal.SIGKILL)
            await restarted.received("n1", [], [kill])
            timed = await restarted.create(job_id, ANN, one, ["b"], {})
            await restarted.received("n1", [], [end(job_id, timed.step_id, timed_out=True)])
            with_job = await restarted.create(job_id, ANN, one, ["c"], {})
            await commands.cancel(cluster, str(job_id), ANN)
            await restarted.received("n1", [], [end(job_id, with_job.step_id)])
            rows = await cluster.db(cluster.store.steps_of, [job_id])
            got = [(r.step_id, r.state, r.exit_signal, r.cancelled_by, r.with_job) for r in rows]
            assert got == [
                (0, "CANCELLED", 9, "ann", False),
                (1, "TIMEOUT", 15, None, False),
                (2, "CANCELLED", 15, None, True),
            ]

    asyncio.run(main())


def test_a_step_that_ends_during_a_database_outage_is_recorded_after_it(db_url: str) -> None:
    """The database refuses the ended step: it is kept and written at the next
    housekeeping that finds the database back (it was missing from sacct for good)."""

    async def main() -> None:
        async with loaded(db_url) as cluster:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            one = StepRequest(1, 1, nodelist=("n1",), exact=True)
            step = await table.create(job_id, ANN, one, ["a"], {})
            store = cluster.store
            record = store.record_step

            def refused(row: object) -> None:
                raise DatabaseUnavailable("the database is unavailable (outage)")

            store.record_step = refused  # type: ignore[method-assign]
            done = StepEnd(job_id=job_id, step_id=step.step_id, exit_code=3)
            await table.received("n1", [], [done])
            assert await cluster.db(store.steps_of, [job_id]) == []
            await table.record_unrecorded()  # still down: kept
            store.record_step = record  # type: ignore[method-assign]
            await table.record_unrecorded()
            rows = await cluster.db(store.steps_of, [job_id])
            assert [(r.step_id, r.state, r.exit_code) for r in rows] == [(0, "FAILED", 3)]
            await table.record_unrecorded()  # (once)
            assert len(await cluster.db(store.steps_of, [job_id])) == 1

    asyncio.run(main())
