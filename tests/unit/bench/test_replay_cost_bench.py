"""``hal bench replay-cost``: each replay in a fresh process of its own, its figures and
the learned/user ratios beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.bench.replay_cost import cpu_model, run_case
from hal.sim.traces import traces_dir

KTH = traces_dir() / "KTH-SP2-1996-2.swf.gz"


@pytest.mark.skipif(not KTH.exists(), reason="needs the KTH-SP2 trace (../shared/traces)")
def test_user_and_learned_side_by_side() -> None:
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    case = run_case((KTH.name, 100, 1, 400), ("user", "learned"))
    user, learned = case["runs"]["user"], case["runs"]["learned"]
    for run in (user, learned):
        assert run["jobs"] == 400
        assert run["cpu_s"] > 0 and run["wall_s"] > 0
        assert run["peak_rss_mib"] > 30  # its own process's, at least an interpreter
    assert user["prediction_mae_s"] != learned["prediction_mae_s"]  # two predictors ran
    assert case["learned_wall_vs_user"] == round(learned["wall_s"] / user["wall_s"], 2)
    assert case["learned_rss_vs_user"] == round(learned["peak_rss_mib"] / user["peak_rss_mib"], 2)
    assert case["first_jobs"] == 400 and case["policy"] == "easy-sjbf"


def test_the_cpu_is_named_as_the_benchmarks_page_names_machines() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists() or "cpu family" not in cpuinfo.read_text(encoding="utf-8"):
        pytest.skip("needs Linux's /proc/cpuinfo with a cpu family (x86)")
    assert ", family " in cpu_model() and " model " in cpu_model()
