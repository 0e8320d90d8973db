"""From SWF records to the jobs a simulation replays, with the literature's cleaning
conventions as options (each paper picks its own; ``Cleaning`` names them all).

Defaults follow the Parallel Workloads Archive's usual practice: drop jobs that never ran
or have no size, size = max(allocated, requested) capped at the machine, a missing
requested time becomes the run time, and the run time is capped at the request (the job
would have been killed there).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hal.core.errors import InvalidRequest
from hal.sim.swf import SwfHeader, SwfRecord, read_swf_table, records_of

SIZE_RULES = ("max", "alloc", "req")


@dataclass(frozen=True, slots=True)
class Cleaning:
    drop_invalid: bool = True  # drop run time <= 0 or size <= 0
    size_rule: str = "max"  # "max": max(field 5, field 8); "alloc": 5; "req": 8 (else 5)
    cap_size: bool = True  # a job larger than the machine is cut to it (else dropped)
    missing_request_is_run: bool = True  # requested time <= 0 → the run time
    cap_run_at_request: bool = True  # run time > requested → requested
    first_jobs: int = 0  # keep only the first K jobs (0 = all)
    procs: int | None = None  # machine size; None → the header's MaxProcs / MaxNodes

    def __post_init__(self) -> None:
        if self.first_jobs < 0:
            raise InvalidRequest(
                f"--first-jobs must be 0 (every job) or a count of jobs, not {self.first_jobs}"
            )
        if self.procs is not None and self.procs < 1:
            raise InvalidRequest(
                f"--procs must be the machine's processor count (1 or more), not {self.procs};"
                " leave it out to take the header's MaxProcs"
            )


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job to replay. ``run`` is how long it really runs once started (it is killed
    at ``requested`` if it would run longer); ``procs`` processors are asked for."""

    id: int
    submit: float
    run: float
    procs: int
    requested: float
    user: int
    record: SwfRecord


@dataclass(frozen=True, slots=True)
class Workload:
    header: SwfHeader
    jobs: tuple[TraceJob, ...]
    machine_procs: int
    dropped: int  # records left out by the cleaning
    capped: int = 0  # jobs larger than the machine, cut to it


def _size(rec: SwfRecord, rule: str) -> int:
    if rule == "alloc":
        return rec.procs_alloc
    if rule == "req":
        return rec.procs_req if rec.procs_req > 0 else rec.procs_alloc
    return max(rec.procs_alloc, rec.procs_req)


def clean(
    header: SwfHeader, records: Iterable[SwfRecord], cleaning: Cleaning, *, ordered: bool = False
) -> Workload:
    """The jobs to replay from ``records``, in (submit time, job number) order;
    ``ordered``: the records already come in that order."""
    if cleaning.size_rule not in SIZE_RULES:
        raise InvalidRequest(f"size rule must be one of {', '.join(SIZE_RULES)}")
    machine = cleaning.procs if cleaning.procs is not None else header.machine_procs
    if not machine or machine <= 0:
        raise InvalidRequest(
            "the trace's header has no MaxProcs or MaxNodes; give the machine size with --procs"
        )
    jobs: list[TraceJob] = []
    submitted: dict[int, float] = {}  # job number → submit time, of the jobs kept
    dropped = capped = 0
    # Some logs are not sorted by submit time (LLNL-Thunder); the replay order is.
    for rec in records if ordered else sorted(records, key=lambda r: (r.submit, r.job)):
        size = _size(rec, cleaning.size_rule)
        run = rec.run
        if cleaning.drop_invalid and (run <= 0 or size <= 0 or rec.submit < 0):
            dropped += 1
            continue
        run = max(run, 0.0)
        cut = size > machine
        if cut:
            if not cleaning.cap_size:
                dropped += 1
                continue
            size = machine
        size = max(size, 1)
        requested = rec.time_req
        if requested <= 0:
            if not cleaning.missing_request_is_run:
                dropped += 1
                continue
            requested = run
        requested = max(requested, 1.0)
        if cleaning.cap_run_at_request:
            run = min(run, requested)
        if rec.job in submitted:
            raise InvalidRequest(
                f"job number {rec.job} appears twice in the trace (submitted at"
                f" {submitted[rec.job]:g} s and {rec.submit:g} s); a replay tells jobs apart"
                " by their number (field 1): give each job its own"
            )
        submitted[rec.job] = rec.submit
        capped += cut
        jobs.append(TraceJob(rec.job, rec.submit, run, size, requested, rec.user, rec))
        if cleaning.first_jobs and len(jobs) >= cleaning.first_jobs:
            break
    return Workload(header, tuple(jobs), machine, dropped, capped)


def load_workload(path: str | Path, cleaning: Cleaning | None = None) -> Workload:
    header, table = read_swf_table(path)
    # sorted on the table, records made lazily: --first-jobs builds only what it keeps
    order = np.lexsort((table[:, 0], table[:, 1]))  # stable, as sorted() is
    return clean(header, records_of(table, order), cleaning or Cleaning(), ordered=True)
