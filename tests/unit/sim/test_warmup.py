"""The literature's warm-up (``--exclude-first-fraction``): the same in ``hal sim run``
and ``hal bench predict``, and refused when it would leave nothing to average."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hal.bench.predict import replay
from hal.cli.main import main
from hal.sim import SimOptions
from hal.sim.run import run_workload
from hal.sim.workload import load_workload


def _queued(write_trace: Any) -> Path:
    """Twenty 4-CPU jobs arriving at once on 4 CPUs: each waits for all before it, so the
    first half's waits are the short ones."""
    path: Path = write_trace([(i, 0.0, 100, 4, 200) for i in range(1, 21)])
    return path


def test_the_bench_leaves_out_the_same_jobs_as_hal_sim_run(write_trace: Any) -> None:
    w = load_workload(_queued(write_trace))
    half = replay(w, 1, "easy", "user", exclude_first_fraction=0.5)
    _, sim = run_workload(w, SimOptions(policy="easy", exclude_first_fraction=0.5))
    whole = replay(w, 1, "easy", "user")
    assert half["mean_wait_s"] == round(sim["mean_wait_s"], 4) == 1450.0  # jobs 11-20
    assert whole["mean_wait_s"] == 950.0  # jobs 1-20: 0, 100, ..., 1900
    assert (half["jobs"], whole["jobs"]) == (10, 20)  # the jobs averaged


@pytest.mark.parametrize("command", [["sim", "run"], ["bench", "predict", "--cases"]])
@pytest.mark.parametrize("fraction", ["1", "1.5", "-0.1"])
def test_a_fraction_that_leaves_nothing_is_refused_before_any_replay(
    write_trace: Any, capsys: Any, command: list[str], fraction: str
) -> None:
    target = str(_queued(write_trace)) if command[0] == "sim" else "sdsc-sp2"
    rc = main([*command, target, "--exclude-first-fraction", fraction, "--json"])
    out, err = capsys.readouterr()
    assert rc != 0
    assert out == ""
    assert "--exclude-first-fraction must be at least 0 and below 1" in err
