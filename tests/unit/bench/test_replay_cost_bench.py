"""``hal bench replay-cost``: each replay in a fresh process of its own, its figures and
the learned/user ratios beside them, in the JSON the command prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hal.bench.replay_cost import TARGETS, cpu_model
from hal.cli.main import main
from hal.testing.traces import trace_path

KTH = trace_path("KTH-SP2-1996-2.swf.gz")


def test_user_and_learned_side_by_side(capsys: Any) -> None:
    """The first 300 jobs of KTH-SP2 (the tests' own copy) through the command itself:
    two replays in fresh processes, the ratios of their measured figures, the CPU."""
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    argv = ["bench", "replay-cost", "--trace", str(KTH), "--first-jobs", "300", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "replay-cost"
    assert out["cpu_model"] == cpu_model() and out["cpu_model"]
    assert out["cpus"] >= 1
    case = out["cases"][KTH.name]
    assert case["trace"] == str(KTH.resolve())
    assert (case["procs"], case["cores_per_node"], case["first_jobs"]) == (100, 1, 300)
    assert case["policy"] == "easy-sjbf"
    assert set(case["runs"]) == {"user", "learned"}
    user, learned = case["runs"]["user"], case["runs"]["learned"]
    for run in (user, learned):
        assert run["jobs"] == 300 and run["procs"] == 100  # the header's MaxProcs
        assert run["cpu_s"] > 0 and run["wall_s"] > 0
        assert run["peak_rss_mib"] > 30  # its own process's, at least an interpreter
    assert user["prediction_mae_s"] != learned["prediction_mae_s"]  # two predictors ran
    assert case["learned_wall_vs_user"] == round(learned["wall_s"] / user["wall_s"], 2)
    assert case["learned_cpu_vs_user"] == round(learned["cpu_s"] / user["cpu_s"], 2)
    assert case["learned_rss_vs_user"] == round(learned["peak_rss_mib"] / user["peak_rss_mib"], 2)
    assert out["targets"] == TARGETS
    assert out["met"] == {key: case[key] <= limit for key, limit in TARGETS.items()}


def test_the_cpu_is_named_as_the_benchmarks_page_names_machines() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists() or "cpu family" not in cpuinfo.read_text(encoding="utf-8"):
        pytest.skip("needs Linux's /proc/cpuinfo with a cpu family (x86)")
    assert ", family " in cpu_model() and " model " in cpu_model()
