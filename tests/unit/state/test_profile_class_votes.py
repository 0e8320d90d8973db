"""The server keeps a job's class only when it changes, and only once
``CONFIRM_SAMPLES`` samples in a row agree: a job hovering at a threshold, or a few
seconds' burst, commits nothing; an earlier run's late sample and an ended job count
for nothing."""

from __future__ import annotations

from hal.core.job import Allocation, Job, JobSpec
from hal.core.profiles import CPU, IO, LIGHT, PROFILE_CLASS
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.state.profiles import CONFIRM_SAMPLES, Votes, changed_classes
from hal.wire.agent import JobUsage
from hal.wire.jobs import JobProfileSample

GiB = 1 << 30


def running(job_id: int, **extra: str) -> Job:
    return Job(
        id=job_id,
        spec=JobSpec(user="alice", script=""),
        state=JobState.RUNNING,
        allocation=Allocation(("n1",), (ResourceVector(cpus=1, memory_bytes=GiB),)),
        extra=extra,
    )


def usage(job_id: int, cpu: float, written: float = 0.0, attempt: int = 0) -> JobUsage:
    profile = JobProfileSample(
        interval_seconds=2.0, source="proc", cpu_util=cpu, rss_bytes=1,
        read_bytes_per_s=0.0, write_bytes_per_s=written,
    )  # fmt: skip
    return JobUsage(
        job_id=job_id, attempt=attempt, rss_bytes=1, max_rss_bytes=1, cpu_seconds=1.0,
        profile=profile,
    )  # fmt: skip


def test_a_new_class_is_kept_once_it_holds() -> None:
    jobs = {1: running(1)}
    votes: Votes = {}
    for _ in range(CONFIRM_SAMPLES - 1):
        assert changed_classes(jobs, votes, [usage(1, 1.0)]) == {}
    assert changed_classes(jobs, votes, [usage(1, 1.0)]) == {1: CPU}


def test_a_job_at_a_threshold_commits_nothing() -> None:
    jobs = {1: running(1, **{PROFILE_CLASS: LIGHT})}
    votes: Votes = {}
    for i in range(4 * CONFIRM_SAMPLES):  # busy, idle, busy, idle...
        assert changed_classes(jobs, votes, [usage(1, 1.0 if i % 2 else 0.0)]) == {}
    # a burst of writes shorter than the confirmation, then back to what it was
    for _ in range(CONFIRM_SAMPLES - 1):
        assert changed_classes(jobs, votes, [usage(1, 0.0, written=1e8)]) == {}
    assert changed_classes(jobs, votes, [usage(1, 0.0)]) == {}
    assert votes == {}  # its class again: nothing pending
    for _ in range(CONFIRM_SAMPLES - 1):
        changed_classes(jobs, votes, [usage(1, 0.0, written=1e8)])
    assert changed_classes(jobs, votes, [usage(1, 0.0, written=1e8)]) == {1: IO}


def test_late_runs_ended_jobs_and_jobs_gone_count_for_nothing() -> None:
    ended = running(2).evolve(state=JobState.COMPLETED)
    jobs = {1: running(1).evolve(restarts=1), 2: ended}
    votes: Votes = {}
    for _ in range(CONFIRM_SAMPLES):
        late = [usage(1, 1.0, attempt=0), usage(2, 1.0), usage(3, 1.0)]
        assert changed_classes(jobs, votes, late) == {}
    assert votes == {}
    changed_classes({1: running(1)}, votes, [usage(1, 1.0)])
    assert 1 in votes
    changed_classes({1: running(1)}, votes, [])  # no longer sampled: forgotten
    assert votes == {}
