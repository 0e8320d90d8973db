"""sacct's UserCPU and SystemCPU: TotalCPU's user and system parts, as the agents (and
srun) measured them, on the batch step's and each numbered step's line, and their sums
over the steps on the job's line, as TotalCPU's; in TotalCPU's format. Where a record
has only the sum (an older agent's or srun's), its parts, and the job line's, are blank;
a record without CPU time has parts of 0."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, call, job

from hal.compat.job_fields import cpu_parts, total_cpu_parts
from hal.wire.jobs import JobInfo, StepRecord

FIELDS = "JobID,UserCPU,SystemCPU,TotalCPU"


def step(step_id: int, total: float, user: float | None, system: float | None) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="python",
        nodelist="n1",
        ntasks=2,
        state="COMPLETED",
        exit_code=0,
        start_time=T0 + 1,
        end_time=T0 + 11,
        total_cpu_seconds=total,
        user_cpu_seconds=user,
        system_cpu_seconds=system,
    )


def ended(*steps: StepRecord, **batch: object) -> JobInfo:
    return job(5, state="COMPLETED", start_time=T0, end_time=T0 + 20, steps=list(steps), **batch)


def sacct(*jobs: JobInfo, fields: str = FIELDS) -> list[str]:
    return call(FakeClient(job_list=list(jobs)), "sacct", "-P", "-n", "-o", fields).lines


def test_each_line_shows_its_user_and_system_time_and_the_job_line_their_sums() -> None:
    done = ended(
        step(0, 3723.5, 3600.25, 123.25),  # over an hour: HH:MM:SS, as TotalCPU
        step(1, 93784.0, 90000.0, 3784.0),  # over a day: D-HH:MM:SS
        cpu_seconds=1.5,
        user_cpu_seconds=1.234,
        system_cpu_seconds=0.266,
    )
    assert sacct(done) == [
        "5|1-02:00:01|01:05:07|1-03:05:09",
        "5.batch|00:01.234|00:00.266|00:01.500",
        "5.0|01:00:00|02:03.250|01:02:03",
        "5.1|1-01:00:00|01:03:04|1-02:03:04",
    ]


def test_a_record_without_the_parts_shows_them_blank_and_so_does_the_job_line() -> None:
    batch = {"cpu_seconds": 1.0, "user_cpu_seconds": 0.75, "system_cpu_seconds": 0.25}
    older_step = ended(step(0, 2.0, None, None), **batch)
    assert sacct(older_step) == [
        "5|||00:03.000",
        "5.batch|00:00.750|00:00.250|00:01.000",
        "5.0|||00:02.000",
    ]
    older_agent = ended(step(0, 2.0, 1.5, 0.5), cpu_seconds=1.0)
    assert sacct(older_agent) == [
        "5|||00:03.000",
        "5.batch|||00:01.000",
        "5.0|00:01.500|00:00.500|00:02.000",
    ]


def test_no_cpu_time_reads_as_parts_of_zero() -> None:
    """A pending job, or a step recorded without usage, has TotalCPU 0: its parts are 0
    too, as the job line's sum of the others' then."""
    pending = job(6, state="PENDING")
    assert sacct(pending, fields="JobID,UserCPU,SystemCPU") == ["6|00:00.000|00:00.000"]
    batch = {"cpu_seconds": 2.0, "user_cpu_seconds": 1.5, "system_cpu_seconds": 0.5}
    done = ended(step(0, 0.0, None, None), **batch)
    assert sacct(done)[0] == "5|00:01.500|00:00.500|00:02.000"


def test_parts_that_are_not_the_records_sum_are_not_shown() -> None:
    """A copy of the job for an earlier run (``sacct -D``) carries that run's TotalCPU
    and the latest run's parts: they are not its own, so they are not known."""
    assert cpu_parts(2.0, 1.5, 0.5) == (1.5, 0.5)
    assert cpu_parts(3.0, 1.5, 0.5) is None
    assert cpu_parts(0.0, 1.5, 0.5) == (0.0, 0.0)
    assert cpu_parts(1.0, None, None) is None
    batch = {"cpu_seconds": 0.1 + 0.2, "user_cpu_seconds": 0.1, "system_cpu_seconds": 0.2}
    assert total_cpu_parts(ended(**batch)) == (0.1, 0.2)
