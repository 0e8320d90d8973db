"""Options and traces that cannot make a replay are refused with a message naming the
option, before any replay, instead of a traceback, a silent default or a summary of
zeros."""

from __future__ import annotations

from typing import Any

import pytest

from hal.cli.main import main


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--procs", "0"], "--procs must be the machine's processor count (1 or more), not 0"),
        (["--procs", "-4"], "--procs must be the machine's processor count (1 or more), not -4"),
        (["--first-jobs", "-3"], "--first-jobs must be 0 (every job) or a count of jobs, not -3"),
        (["--cores-per-node", "0"], "--cores-per-node must be 1 or more, not 0"),
        (
            ["--procs", "10", "--cores-per-node", "4"],
            "--cores-per-node 4 does not divide the machine's 10 processors",
        ),
        (["--cores-per-node", "3"], "--cores-per-node 3 does not divide the machine's 4"),
        (["--drop-oversize"], "no job is left to replay: the cleaning dropped the trace's 2"),
        (["--workers", "0"], "--workers must be 1 or more, not 0"),
    ],
)
@pytest.mark.parametrize("command", [["run", "--policy", "easy"], ["compare"]])
def test_an_option_that_cannot_make_a_replay_is_named(
    write_trace: Any, capsys: Any, command: list[str], options: list[str], message: str
) -> None:
    trace = write_trace([(1, 0.0, 10, 8, 20), (2, 5.0, 10, 6, 20)], procs=4)
    rc = main(["sim", command[0], str(trace), *command[1:], *options, "--json"])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert message in err


def test_a_trace_without_jobs_is_refused(tmp_path: Any, capsys: Any) -> None:
    empty = tmp_path / "empty.swf"
    empty.write_text("; MaxProcs: 4\n")
    assert main(["sim", "run", str(empty), "--json"]) == 2
    assert "the trace holds no job records" in capsys.readouterr().err


def test_compare_without_a_policy_says_what_to_name(write_trace: Any, capsys: Any) -> None:
    trace = write_trace([(1, 0.0, 10, 1, 20)])
    assert main(["sim", "compare", str(trace), "--policies", " , "]) == 2
    assert "--policies names no policy" in capsys.readouterr().err


def test_the_header_size_is_still_the_default(write_trace: Any, capsys: Any) -> None:
    """Only an explicit --procs of 0 or less is refused; leaving it out keeps the header's."""
    trace = write_trace([(1, 0.0, 10, 8, 20)], procs=4)
    assert main(["sim", "run", str(trace), "--json"]) == 0
    assert '"machine_procs": 4' in capsys.readouterr().out


def test_nodes_that_fill_the_machine_exactly_are_accepted(write_trace: Any, capsys: Any) -> None:
    trace = write_trace([(1, 0.0, 10, 8, 20)], procs=4)
    assert main(["sim", "run", str(trace), "--procs", "12", "--cores-per-node", "4", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"machine_procs": 12' in out and '"nodes": 3' in out


@pytest.mark.parametrize("option", ["--swf-out", "--save"])
def test_an_output_in_a_missing_folder_is_refused_before_the_replay(
    write_trace: Any, tmp_path: Any, capsys: Any, monkeypatch: Any, option: str
) -> None:
    """Not a FileNotFoundError traceback after a replay that may have taken an hour."""
    import hal.sim

    def no_replay(*args: Any) -> None:
        raise AssertionError("replayed before checking the output")

    monkeypatch.setattr(hal.sim, "run_workload", no_replay)
    trace = write_trace([(1, 0.0, 10, 1, 20)])
    rc = main(["sim", "run", str(trace), option, str(tmp_path / "no" / "out"), "--json"])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert f"{option} {tmp_path / 'no' / 'out'}: the folder" in err


@pytest.mark.parametrize("option", ["--swf-out", "--save"])
def test_an_output_that_cannot_be_written_is_an_error_not_a_traceback(
    write_trace: Any, tmp_path: Any, capsys: Any, option: str
) -> None:
    trace = write_trace([(1, 0.0, 10, 1, 20)])
    rc = main(["sim", "run", str(trace), option, str(tmp_path), "--json"])  # a folder
    err = capsys.readouterr().err
    assert rc == 2
    assert f"hal sim: cannot write {tmp_path}" in err


def test_compare_refuses_an_unknown_policy_before_any_replay(
    write_trace: Any, capsys: Any, monkeypatch: Any
) -> None:
    """Not after replaying the valid ones first (hours on a whole trace)."""
    import hal.sim

    def no_replay(*args: Any) -> None:
        raise AssertionError("replayed before checking the policies")

    monkeypatch.setattr(hal.sim, "run_workload", no_replay)
    trace = write_trace([(1, 0.0, 10, 1, 20)])
    assert main(["sim", "compare", str(trace), "--policies", "easy,esay"]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'esay'; choose from fcfs, easy, conservative, easy-sjbf" in err


def test_compare_replays_a_policy_named_twice_once(write_trace: Any, capsys: Any) -> None:
    trace = write_trace([(1, 0.0, 10, 1, 20), (2, 1.0, 10, 4, 20)])
    assert main(["sim", "compare", str(trace), "--policies", "easy,fcfs,easy"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split() == ["easy", "fcfs"]


def test_run_lines_up_every_key_of_its_text_summary(write_trace: Any, capsys: Any) -> None:
    """--topology adds keys longer than the 22 columns the keys were padded to."""
    trace = write_trace([(1, 0.0, 10, 2, 20), (2, 1.0, 10, 4, 20)])
    assert main(["sim", "run", str(trace), "--topology", "leaf=2,levels=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().startswith("unaware_mean_leaves_per_multinode_job:") for line in lines)
    assert len({line.index(": ") for line in lines}) == 1


def test_compare_keeps_wide_numbers_in_their_columns(write_trace: Any, capsys: Any) -> None:
    """A makespan of 1,000,000,010 s is wider than the 12 columns a policy was given."""
    trace = write_trace([(1, 0.0, 10, 1, 20), (2, 1e9, 10, 1, 20)])
    assert main(["sim", "compare", str(trace), "--policies", "fcfs,easy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["fcfs", "easy"]
    assert all(len(line.split()) == 3 for line in lines[1:])
    assert ["makespan_s", "1,000,000,010", "1,000,000,010"] in [line.split() for line in lines]
    assert len({len(line) for line in lines}) == 1  # right-aligned: every row as wide
