"""``JobMail``: which job changes send mail, as slurmctld decides (``--mail-type``).

It listens to committed job changes (``Cluster.on_jobs_changed``, O(changed jobs with
mail)) and, once a second, checks the running jobs that asked for time-limit warnings.
What it decides goes to ``MailProgram``, which runs the program off the hot paths.

When (Slurm's rules, from memory of slurmctld's job_mgr.c and node_scheduler.c):

* BEGIN: a run starts. An array without ARRAY_TASKS: its first element to start only.
* END / FAIL: a job ends. FAIL (when asked) for FAILED, TIMEOUT, NODE_FAIL, PREEMPTED,
  BOOT_FAIL, DEADLINE, OUT_OF_MEMORY; otherwise END (when asked) for any end. An array
  without ARRAY_TASKS: once, a summary, when its last element ends.
* REQUEUE: the job goes back to the queue (``scontrol requeue``, a node failure, a
  preemptor in mode requeue).
* INVALID_DEPEND: its dependency can never be met (a pass's verdict, seen by the tick).
* TIME_LIMIT_50/80/90, TIME_LIMIT: its run reaches that share of its limit (or, for
  TIME_LIMIT, ends TIMEOUT first); each once per run (a requeued job's next run warns
  again).
* Components 1.. of a heterogeneous job send nothing: the job's mail is component 0's.

Mail already due when the server starts again is not sent twice: the thresholds a
running job passed before the start count as sent (one passed while the server was down
is not sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hal.core.clock import Clock
from hal.core.job import Job
from hal.core.states import TERMINAL_STATES, JobState, PendingReason
from hal.core.suspension import suspended_seconds
from hal.server.mail_program import Mail, MailProgram
from hal.slurm.mail import (
    TIME_SHARES,
    TIME_WARNINGS,
    MailFacts,
    MailType,
    mail_environment,
    subject,
)
from hal.state.cluster import Cluster

log = logging.getLogger("hal.mail")
TICK_S = 1.0
# the end states that FAIL mail is for (Slurm: a base state from JOB_FAILED on, so every
# end but COMPLETED and CANCELLED)
FAILED_STATES = TERMINAL_STATES - {JobState.COMPLETED, JobState.CANCELLED}


@dataclass(slots=True)
class _Seen:
    """What the last committed version of a job with mail was."""

    state: JobState
    restarts: int
    reason: PendingReason
    start_time: float | None
    warned: int = 0  # the time-limit warnings sent for this run


class JobMail:
    def __init__(self, cluster: Cluster, program: MailProgram, clock: Clock) -> None:
        self.cluster = cluster
        self.program = program
        self.clock = clock
        self._seen: dict[int, _Seen] = {}
        self._timed: set[int] = set()  # running jobs with time-limit warnings to send
        # pending jobs with INVALID_DEPEND and a dependency: a pass's verdict on it is
        # kept in memory only (Cluster.apply_plan), so the tick looks for it
        self._depending: set[int] = set()
        # arrays whose BEGIN summary went, until their last element ends
        self._began_arrays: set[int] = set()
        # arrays whose end summary went in this batch of changes: several elements that
        # end in one commit each find the whole array ended
        self._summed: set[int] = set()
        cluster.on_jobs_changed(self._on_jobs)

    def seed(self, jobs: Iterable[Job]) -> None:
        """The jobs the server loaded at start: their next change is a transition."""
        now = self.clock.now()
        for job in jobs:
            if self._array_summary(job, MailType.BEGIN) and job.start_time is not None:
                array = job.array_job_id
                if array is not None and self._array_ended(array) is None:
                    self._began_arrays.add(array)
            if not job.spec.mail_type or job.state.is_terminal:
                continue
            seen = _Seen(job.state, job.restarts, job.reason, job.start_time)
            if job.state is JobState.RUNNING:
                run = self._run_s(job, now)
                for flag, share in TIME_SHARES:
                    if run >= share * job.time_limit_s > 0:
                        seen.warned |= flag
                self._watch(job)
            if job.spec.mail_type & MailType.INVALID_DEPEND and job.spec.dependency is not None:
                self._depending.add(job.id)
            self._seen[job.id] = seen

    async def run(self, stop: asyncio.Event) -> None:
        """The program's workers and the time-limit tick, until ``stop``."""
        workers = asyncio.create_task(self.program.run(), name="hal-mail-program")
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), TICK_S)
                try:
                    self.tick(self.clock.now())
                except Exception:
                    log.exception("job mail: the time-limit check failed")
        finally:
            workers.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await workers

    # -- the time-limit warnings ----------------------------------------------------------
    def tick(self, now: float) -> None:
        never = PendingReason.DEPENDENCY_NEVER_SATISFIED
        for job_id in list(self._depending):
            job = self.cluster.jobs.get(job_id)
            seen = self._seen.get(job_id)
            if job is None or seen is None or job.state is not JobState.PENDING:
                self._depending.discard(job_id)
            elif job.reason is never and seen.reason is not never:
                seen.reason = never
                self._send(MailType.INVALID_DEPEND, job)
        for job_id in list(self._timed):
            job = self.cluster.jobs.get(job_id)
            seen = self._seen.get(job_id)
            if job is None or seen is None or job.state is not JobState.RUNNING:
                self._timed.discard(job_id)
                continue
            if not job.time_limit_s:
                continue
            run = self._run_s(job, now)
            for flag, share in TIME_SHARES:
                due = job.spec.mail_type & flag and not seen.warned & flag
                if due and run >= share * job.time_limit_s:
                    seen.warned |= flag
                    self._send(flag, job, run_s=run)

    def _watch(self, job: Job) -> None:
        if job.spec.mail_type & TIME_WARNINGS:
            self._timed.add(job.id)

    # -- the job-change listener ----------------------------------------------------------
    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        try:
            self._decide(jobs)
        except Exception:  # a bug here must cost mail, never the commit that called it
            log.exception("job mail: deciding failed")

    def _decide(self, jobs: Sequence[Job]) -> None:
        now = self.clock.now()
        self._summed.clear()
        for job in jobs:
            flags = job.spec.mail_type
            if not flags or (job.spec.het is not None and job.spec.het.offset != 0):
                continue
            prev = self._seen.get(job.id)
            # back in the queue (prev None: a finished job requeued, which had left _seen)
            if (prev is not None and job.restarts > prev.restarts) or (
                prev is None and job.restarts and job.state is JobState.PENDING
            ):
                self._requeued(job, prev, now)
            elif job.state is JobState.RUNNING and (prev is None or prev.state is JobState.PENDING):
                self._began(job, now)
            elif job.state.is_terminal and prev is not None:
                self._ended(job, prev, now)
            if (
                job.reason is PendingReason.DEPENDENCY_NEVER_SATISFIED
                and (prev is None or prev.reason is not job.reason)
                and flags & MailType.INVALID_DEPEND
            ):
                self._send(MailType.INVALID_DEPEND, job)
            if flags & MailType.INVALID_DEPEND and job.spec.dependency is not None:
                if job.state is JobState.PENDING:
                    self._depending.add(job.id)
                else:
                    self._depending.discard(job.id)
            if job.state.is_terminal:
                self._seen.pop(job.id, None)
                self._timed.discard(job.id)
                array = job.array_job_id
                if array in self._began_arrays and self._array_ended(array) is not None:
                    self._began_arrays.discard(array)
            else:
                warned = prev.warned if prev is not None and prev.restarts == job.restarts else 0
                self._seen[job.id] = _Seen(
                    job.state, job.restarts, job.reason, job.start_time, warned
                )

    def _requeued(self, job: Job, prev: _Seen | None, now: float) -> None:
        self._timed.discard(job.id)
        if job.spec.mail_type & MailType.REQUEUE:
            start = prev.start_time if prev is not None else None
            self._send(MailType.REQUEUE, job, run_s=None if start is None else now - start)

    def _began(self, job: Job, now: float) -> None:
        self._watch(job)
        if not job.spec.mail_type & MailType.BEGIN:
            return
        array = job.array_job_id
        if array is not None and self._array_summary(job, MailType.BEGIN):
            if array in self._began_arrays:
                return  # Slurm mails an array's first start only
            self._began_arrays.add(array)
        self._send(MailType.BEGIN, job)

    @staticmethod
    def _array_summary(job: Job, event: MailType) -> bool:
        """Whether ``job`` is an array element whose ``event`` mail is the array's."""
        flags = job.spec.mail_type
        return (
            job.array_job_id is not None
            and bool(flags & event)
            and not (flags & MailType.ARRAY_TASKS)
        )

    def _array_ended(self, array: int) -> list[Job] | None:
        """The array's elements when every one has ended; None while one has not (the
        last ones are looked at first: they are the ones still running)."""
        elements = [self.cluster.jobs[i] for i in self.cluster.arrays.get(array, ())]
        if any(not e.state.is_terminal for e in reversed(elements)):
            return None
        return elements

    def _ended(self, job: Job, prev: _Seen, now: float) -> None:
        flags = job.spec.mail_type
        limit = MailType.TIME_LIMIT
        if job.state is JobState.TIMEOUT and flags & limit and not prev.warned & limit:
            self._send(limit, job)  # the agent's kill came before the tick saw the limit
        if job.state in FAILED_STATES and flags & MailType.FAIL:
            event = MailType.FAIL
        elif flags & MailType.END:
            event = MailType.END
        else:
            return
        array = job.array_job_id
        if array is None or flags & MailType.ARRAY_TASKS:
            self._send(event, job)
            return
        if array not in self._summed and (elements := self._array_ended(array)) is not None:
            self._summed.add(array)
            self._send(event, job, elements=elements)

    # -- the mail --------------------------------------------------------------------------
    def _send(
        self,
        event: MailType,
        job: Job,
        *,
        run_s: float | None = None,
        elements: Sequence[Job] = (),
    ) -> None:
        facts = self._facts(event, job, run_s, elements)
        env = mail_environment(event, facts, self.cluster.config.cluster_name)
        self.program.post(Mail(job.spec.mail_user, subject(event, facts), env))

    def _facts(
        self, event: MailType, job: Job, run_s: float | None, elements: Sequence[Job]
    ) -> MailFacts:
        now = self.clock.now()
        start = job.start_time
        if run_s is None and start is not None:
            run_s = self._run_s(job, now)
        elif run_s is None and event in (MailType.END, MailType.FAIL):
            run_s = 0.0  # Slurm gives a job that ends unstarted a start at its end
        array = job.array_job_id
        # an array element's mail without ARRAY_TASKS speaks of the whole array, as
        # Slurm's (which reads its array's record)
        summary = array is not None and not job.spec.mail_type & MailType.ARRAY_TASKS
        ended = elements or [job]
        return MailFacts(
            job_id=array if summary and array is not None else job.id,
            name=job.spec.name,
            user=job.spec.user,
            state=job.state.value,
            queued_s=None if start is None else max(0.0, start - job.submit_time),
            run_s=run_s,
            exit_codes=(min(e.exit_code for e in ended), max(e.exit_code for e in ended)),
            max_signal=max(e.exit_signal for e in ended),
            array_job_id=array,
            task_id=job.array_task_id,
            summary=summary,
            task_count=len(self.cluster.arrays.get(array, ())) if array is not None else 0,
        )

    @staticmethod
    def _run_s(job: Job, now: float) -> float:
        if job.start_time is None:
            return 0.0
        end = job.end_time if job.end_time is not None else now
        return max(0.0, end - job.start_time - suspended_seconds(job, now))
