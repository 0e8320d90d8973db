"""``JobMail`` remembers an array whose BEGIN mail went (Slurm mails an array's first
start only) for as long as the array runs: only arrays that asked for BEGIN mail, and
forgotten when the last element ends, whether or not an END summary is sent, so a server
that runs arrays for months does not keep every array id it ever started."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hal.config.mail import MailConfig
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import TERMINAL_STATES, JobState
from hal.server.job_mail import FAILED_STATES, JobMail
from hal.server.mail_program import MailProgram
from hal.slurm.mail import MailType
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.testing.builders import JobBuilder

ARRAY = 10


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    yield Cluster(store, HalConfig(), VirtualClock(1_000.0))
    store.close()


def element(index: int, mail: int, state: JobState = JobState.PENDING) -> Job:
    builder = JobBuilder(ARRAY + index).array(ARRAY, index)
    job = (builder.running_on("n1", start=900.0) if state is JobState.RUNNING else builder).build()
    if state not in (JobState.PENDING, JobState.RUNNING):
        job = job.evolve(state=state, start_time=900.0)
    return job.evolve(spec=dataclasses.replace(job.spec, mail_type=mail, mail_user="bob"))


def commit(cluster: Cluster, *jobs: Job) -> None:
    """What a commit does to the mirror: store the jobs, tell the listeners."""
    for job in jobs:
        cluster.put(job)
    for listener in cluster._listeners:
        listener(jobs)


def mailer(cluster: Cluster, jobs: Sequence[Job] = ()) -> JobMail:
    for job in jobs:
        cluster.put(job)
    mail = JobMail(cluster, MailProgram(MailConfig(), lambda _: None), cluster.clock)
    mail.seed(cluster.jobs.values())
    return mail


def test_seed_remembers_only_started_arrays_with_begin_mail_still_running(
    cluster: Cluster,
) -> None:
    no_mail = [element(0, 0, JobState.RUNNING), element(1, 0)]
    assert mailer(cluster, no_mail)._began_arrays == set()
    begin = int(MailType.BEGIN)
    ended = [element(0, begin, JobState.COMPLETED), element(1, begin, JobState.FAILED)]
    assert mailer(cluster, ended)._began_arrays == set()
    running = [element(0, begin, JobState.COMPLETED), element(1, begin, JobState.RUNNING)]
    assert mailer(cluster, running)._began_arrays == {ARRAY}


def test_an_array_with_begin_mail_only_is_forgotten_at_its_last_end(cluster: Cluster) -> None:
    begin = int(MailType.BEGIN)
    mail = mailer(cluster, [element(0, begin), element(1, begin)])
    commit(cluster, element(0, begin, JobState.RUNNING))
    assert mail._began_arrays == {ARRAY} and mail.program.queue.qsize() == 1
    commit(cluster, element(1, begin, JobState.RUNNING))
    assert mail.program.queue.qsize() == 1  # the array's first start only
    commit(cluster, element(0, begin, JobState.COMPLETED))
    assert mail._began_arrays == {ARRAY}
    commit(cluster, element(1, begin, JobState.COMPLETED))
    assert mail._began_arrays == set()


def test_fail_mail_is_for_every_end_but_completed_and_cancelled() -> None:
    assert {s.name for s in FAILED_STATES} == {
        "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
    }  # fmt: skip
    assert FAILED_STATES <= TERMINAL_STATES
