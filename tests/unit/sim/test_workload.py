"""The literature's cleaning conventions, one option each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hal.core.errors import InvalidRequest
from hal.sim.swf import SwfHeader, SwfRecord, read_swf
from hal.sim.workload import Cleaning, clean, load_workload
from hal.testing.traces import trace_path

THUNDER = trace_path("LLNL-Thunder-2007-1.1-cln.head3000.swf.gz")


def rec(
    jid: int, submit: float, run: float, alloc: int, req_procs: int, req_time: float
) -> SwfRecord:
    return SwfRecord(jid, submit, -1, run, alloc, -1, -1, req_procs, req_time, -1, 1, 1, 1, -1,
                     -1, -1, -1, -1)  # fmt: skip


HEADER = SwfHeader([("MaxProcs", "8")])


def test_defaults_drop_unrun_jobs_and_take_the_larger_size() -> None:
    """Cancelled-before-start jobs (run -1) vanish; size = max(allocated, requested)."""
    w = clean(HEADER, [rec(1, 0, -1, 2, 2, 10), rec(2, 1, 5, 2, 4, 10), rec(3, 2, 5, 0, -1, 9)],
              Cleaning())  # fmt: skip
    assert [j.id for j in w.jobs] == [2]
    assert w.jobs[0].procs == 4 and w.dropped == 2


def test_sizes_are_capped_at_the_machine_or_dropped() -> None:
    """A 16-processor job on an 8-processor machine is cut to 8, or dropped on request."""
    recs = [rec(1, 0, 5, 16, 16, 10)]
    assert clean(HEADER, recs, Cleaning()).jobs[0].procs == 8
    assert clean(HEADER, recs, Cleaning(cap_size=False)).jobs == ()


def test_missing_request_becomes_run_time_and_run_is_capped_at_request() -> None:
    """No estimate → the run time is the estimate; overruns are cut at the request."""
    w = clean(HEADER, [rec(1, 0, 50, 1, 1, -1), rec(2, 1, 90, 1, 1, 60)], Cleaning())
    assert (w.jobs[0].requested, w.jobs[0].run) == (50, 50)
    assert (w.jobs[1].requested, w.jobs[1].run) == (60, 60)
    kept = clean(HEADER, [rec(2, 1, 90, 1, 1, 60)], Cleaning(cap_run_at_request=False))
    assert kept.jobs[0].run == 90


def test_first_jobs_procs_override_and_unsorted_submits() -> None:
    """--first-jobs cuts after cleaning, in submit order; --procs beats the header."""
    recs = [rec(2, 10, 5, 1, 1, 9), rec(1, 0, 5, 1, 1, 9), rec(3, 20, 5, 1, 1, 9)]
    w = clean(HEADER, recs, Cleaning(first_jobs=2, procs=64))
    assert [j.id for j in w.jobs] == [1, 2]
    assert w.machine_procs == 64


def test_no_machine_size_anywhere_is_a_user_error() -> None:
    """METACENTRUM's copy has no header: the user must say --procs."""
    with pytest.raises(InvalidRequest, match="--procs"):
        clean(SwfHeader(), [rec(1, 0, 5, 1, 1, 9)], Cleaning())


def test_loading_a_prefix_of_an_unsorted_trace_sorts_before_it_cuts() -> None:
    """LLNL-Thunder is not in submit order: the first jobs are the earliest submitted,
    the same as cleaning every record and then cutting."""
    header, records = read_swf(THUNDER)
    every = clean(header, records, Cleaning())
    first = load_workload(THUNDER, Cleaning(first_jobs=2_000))
    assert [j.record for j in first.jobs] == [j.record for j in every.jobs[:2_000]]
    assert [j.submit for j in first.jobs] == sorted(j.submit for j in first.jobs)
    file_order = [r.job for r in records[:2_000]]
    assert file_order != [j.id for j in first.jobs]  # the trace really is out of order


@pytest.mark.parametrize("number", [7, -1])
def test_a_job_number_used_twice_is_refused(number: int) -> None:
    """The replay tells jobs apart by number: two jobs 7 (or two unknown, -1) became
    one job run twice, the other lost, and a utilisation above 1."""
    recs = [rec(number, 0, 100, 8, 8, 200), rec(number, 5, 10, 8, 8, 20), rec(3, 6, 1, 1, 1, 9)]
    with pytest.raises(InvalidRequest, match=rf"job number {number} appears twice"):
        clean(HEADER, recs, Cleaning())


def test_a_job_number_used_again_past_the_cut_or_by_a_dropped_record_is_fine() -> None:
    recs = [rec(1, 0, -1, 2, 2, 10), rec(1, 1, 5, 2, 2, 10), rec(2, 2, 5, 1, 1, 9),
            rec(2, 3, 5, 1, 1, 9)]  # fmt: skip
    assert [j.id for j in clean(HEADER, recs, Cleaning(first_jobs=2)).jobs] == [1, 2]


def test_jobs_cut_to_the_machine_are_counted(write_trace: Any, capsys: Any) -> None:
    """--procs below the largest job caps those jobs (the convention); the summary says
    how many, as it says how many were dropped."""
    from hal.cli.main import main

    trace = write_trace([(1, 0, 10, 8, 20), (2, 1, 10, 2, 20), (3, 2, 10, 6, 20)], procs=8)
    assert clean(HEADER, [rec(1, 0, 5, 16, 16, 10), rec(2, 1, 5, 2, 2, 10)], Cleaning()).capped == 1
    assert main(["sim", "run", str(trace), "--procs", "4", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["capped"], summary["dropped"], summary["trace_jobs"]) == (2, 0, 3)
    assert main(["sim", "run", str(trace), "--procs", "4", "--drop-oversize", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["capped"], summary["dropped"], summary["trace_jobs"]) == (0, 2, 1)
