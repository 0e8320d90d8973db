"""The SWF edge: every field read as written, headers kept, gzip both ways."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from hal.sim.swf import SwfError, read_swf, write_swf
from hal.sim.workload import Cleaning
from hal.testing.traces import trace_path

KTH = trace_path("KTH-SP2-1996-2.swf.gz")


def test_reads_all_18_fields_and_the_machine_size(write_trace: Any) -> None:
    """A trace's header says how big the machine is; job lines keep -1 as unknown."""
    path = write_trace([(1, 0, 10, 2, 20), (2, 5, 7, 1, -1)], procs=8)
    header, recs = read_swf(path)
    assert header.machine_procs == 8
    assert header.get("maxnodes") == "8"
    assert [r.job for r in recs] == [1, 2]
    assert recs[0].run == 10 and recs[0].procs_alloc == 2 and recs[0].time_req == 20
    assert recs[1].time_req == -1 and recs[1].think_time == -1


def test_round_trip_through_gzip(tmp_path: Path, write_trace: Any) -> None:
    """Per-job results written as .swf.gz read back identical."""
    src = write_trace([(1, 0, 10, 2, 20), (2, 5, 7, 1, 9)])
    header, recs = read_swf(src)
    out = tmp_path / "out.swf.gz"
    write_swf(out, header, recs)
    with gzip.open(out, "rt") as fh:
        assert fh.readline().startswith("; MaxProcs: 4")
    header2, recs2 = read_swf(out)
    assert recs2 == recs
    assert header2.machine_procs == 4


def test_a_short_line_names_the_file_and_line(tmp_path: Path) -> None:
    """A truncated trace is refused with the line to look at, not a numpy traceback."""
    path = tmp_path / "bad.swf"
    path.write_text("; MaxProcs: 4\n1 0 -1 10 2\n")
    with pytest.raises(SwfError, match=r"bad.swf:2: expected 18 fields"):
        read_swf(path)


def test_reads_a_real_archive_file() -> None:
    """KTH-SP2 from the Parallel Workloads Archive: 28,489 jobs on 100 processors."""
    header, recs = read_swf(KTH)
    assert header.machine_procs == 100
    assert len(recs) == 28_489


@pytest.mark.parametrize("word", ["x", "1_0"])  # 1_0: Python's float() reads it, numpy not
def test_a_word_that_is_no_number_names_the_file_and_line(tmp_path: Path, word: str) -> None:
    path = tmp_path / "bad.swf"
    good = " ".join(["1"] * 18)
    path.write_text(f"; MaxProcs: 4\n{good}\n{' '.join(['1'] * 17)} {word}\n")
    with pytest.raises(SwfError, match=rf"bad.swf:3: field 18 \(think_time\) is '{word}'"):
        read_swf(path)


def test_a_short_line_and_a_long_line_do_not_make_two_jobs(tmp_path: Path) -> None:
    """17 fields on one line and 19 on the next add up to 36, but they are two broken
    lines, not two jobs with their fields shifted."""
    path = tmp_path / "bad.swf"
    path.write_text(f"; MaxProcs: 4\n{' '.join(['1'] * 17)}\n{' '.join(['2'] * 19)}\n")
    with pytest.raises(SwfError, match=r"bad.swf:2: expected 18 fields, found 17"):
        read_swf(path)


@pytest.mark.parametrize("word", ["nan", "inf", "-inf", "NaN", "1e400"])
def test_a_number_that_is_not_finite_names_the_line_and_field(tmp_path: Path, word: str) -> None:
    """A requested time of ``nan`` is no time: refused where it is written, not a
    traceback from the middle of a replay."""
    path = tmp_path / "bad.swf"
    fields = ["1"] * 18
    fields[8] = word
    path.write_text(f"; MaxProcs: 4\n{' '.join(['1'] * 18)}\n{' '.join(fields)}\n")
    with pytest.raises(SwfError, match=rf"bad.swf:3: field 9 \(time_req\) is '{word}'"):
        read_swf(path)


def test_a_count_too_large_for_an_integer_names_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.swf"
    fields = ["1"] * 18
    fields[4] = "1e30"
    path.write_text(f"; MaxProcs: 4\n{' '.join(fields)}\n")
    with pytest.raises(SwfError, match=r"bad.swf:2: field 5 \(procs_alloc\) is '1e30'"):
        read_swf(path)


def _gzipped_trace(jobs: int = 300) -> bytes:
    lines = ["; MaxProcs: 4"]
    lines += [f"{j} {j} -1 10 2 -1 -1 2 20 -1 1 1 1 -1 1 1 -1 -1" for j in range(1, jobs + 1)]
    return gzip.compress(("\n".join(lines) + "\n").encode())


def test_a_truncated_gzip_trace_is_refused_with_a_message(tmp_path: Path) -> None:
    """A download cut short: an error naming the file, not an EOFError traceback."""
    data = _gzipped_trace()
    path = tmp_path / "cut.swf.gz"
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(SwfError, match=r"cut.swf.gz.*truncated or corrupt"):
        read_swf(path)


def test_a_corrupt_gzip_trace_is_refused_with_a_message(tmp_path: Path) -> None:
    data = bytearray(_gzipped_trace())
    data[40:60] = b"\xff" * 20
    path = tmp_path / "bad.swf.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(SwfError, match=r"bad.swf.gz.*truncated or corrupt"):
        read_swf(path)


def test_gzip_is_recognised_by_its_content_not_its_name(tmp_path: Path) -> None:
    """A compressed trace saved without ``.gz`` (or a plain one with it) reads the same."""
    data = _gzipped_trace(jobs=3)
    packed = tmp_path / "packed.swf"
    packed.write_bytes(data)
    plain = tmp_path / "plain.swf.gz"
    plain.write_bytes(gzip.decompress(data))
    assert read_swf(packed) == read_swf(plain)
    assert len(read_swf(packed)[1]) == 3


def test_a_byte_order_mark_does_not_hide_the_header(tmp_path: Path) -> None:
    path = tmp_path / "bom.swf"
    path.write_bytes(b"\xef\xbb\xbf; MaxProcs: 4\n" + b" ".join([b"1"] * 18) + b"\n")
    header, recs = read_swf(path)
    assert header.machine_procs == 4 and len(recs) == 1


@pytest.mark.parametrize("procs", ["-1", "0"])
def test_an_unknown_maxprocs_falls_back_to_maxnodes(tmp_path: Path, procs: str) -> None:
    """-1 is SWF's "unknown" in the header too: MaxNodes then sizes the machine."""
    path = tmp_path / "h.swf"
    path.write_text(f"; MaxProcs: {procs}\n; MaxNodes: 8\n{' '.join(['1'] * 18)}\n")
    header, _ = read_swf(path)
    assert header.machine_procs == 8
    path.write_text(f"; MaxProcs: {procs}\n{' '.join(['1'] * 18)}\n")
    assert read_swf(path)[0].machine_procs is None


def test_swf_out_reads_back_as_the_jobs_replayed(tmp_path: Path, capsys: Any) -> None:
    """``--swf-out`` is SWF the parser reads back: the same jobs (submit, size, request,
    run time) with the simulated waits, to the second's fraction the trace gave."""
    from hal.cli.main import main
    from hal.sim.workload import load_workload

    lines = ["; MaxProcs: 4"]
    jobs = [(1, 0, 100, 4, 200), (2, 5.5, 10.333, 4, 20.7), (3, 6.25, 3.125, 1, 9), (4, 7, 4, 9, 8)]
    for jid, submit, run, size, req in jobs:
        lines.append(f"{jid} {submit} -1 {run} {size} -1 -1 {size} {req} -1 1 1 1 -1 1 1 -1 -1")
    trace = tmp_path / "frac.swf"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.swf"
    assert main(["sim", "run", str(trace), "--swf-out", str(out), "--json"]) == 0
    capsys.readouterr()
    before = load_workload(trace).jobs
    after = load_workload(out).jobs
    key = [(j.id, j.submit, j.procs, j.requested, j.run) for j in before]
    assert [(j.id, j.submit, j.procs, j.requested, j.run) for j in after] == key
    _, recs = read_swf(out)
    assert [r.wait for r in recs] == [0, 94.5, 104.083, 106.458]  # 4 waits for 3 to end


@pytest.mark.parametrize("options", [["--procs", "4"], ["--procs", "16"], []])
def test_swf_out_names_the_machine_it_was_replayed_on(
    write_trace: Any, tmp_path: Path, capsys: Any, options: list[str]
) -> None:
    """With --procs, the header's MaxProcs was copied unchanged: read back, an 8-processor
    job replayed on 4 became an 8-processor job again."""
    from hal.cli.main import main
    from hal.sim.workload import load_workload

    trace = write_trace([(1, 0, 10, 8, 20), (2, 1, 10, 2, 20)], procs=8)
    out = tmp_path / "out.swf"
    assert main(["sim", "run", str(trace), *options, "--swf-out", str(out), "--json"]) == 0
    capsys.readouterr()
    cleaning = Cleaning(procs=int(options[1])) if options else Cleaning()
    replayed = load_workload(trace, cleaning)
    back = load_workload(out)
    assert back.machine_procs == replayed.machine_procs
    assert [(j.id, j.procs) for j in back.jobs] == [(j.id, j.procs) for j in replayed.jobs]
