"""``hal bench harmonic-dissonance`` on a tiny slice of a trace in the repository: the
JSON carries the keys the issue names, the figures come from the runs (no interference
in the reference run; the oblivious run loses slowdown to it; a calm truth loses none),
and what is not measured is null, not zero. ``hal bench sched-pass --dissonance`` on a
small pass: its shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hal.bench.dissonance_pass import run_dissonance_pass_bench
from hal.bench.harmonic_dissonance import run_bench, run_slice
from hal.bench.slices import Slice
from hal.cli.parser import build_parser
from hal.testing.traces import trace_path

TINY = Slice("KTH-SP2-1996-2.swf.gz", 300, 96, 8, trace_path("KTH-SP2-1996-2.swf.gz"))


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return run_bench(True, [TINY], seed=1, pass_repeats=0, live=False)


def test_the_json_carries_the_issue_s_keys(result: dict[str, Any]) -> None:
    json.dumps(result)
    sim = result["sim"]
    for run in ("oblivious", "plugin", "oracle"):
        assert isinstance(sim["interference_bsld"][run], float)
    for run in ("oblivious", "plugin"):
        assert 0 < sim["utilization"][run] <= 100
    assert sim["malleable_mean_jct_s"] is None
    assert result["live"] is None and "not measured" in result["not_measured"]
    assert "pass_overhead_pct" not in result  # (not run: pass_repeats=0)


def test_the_figures_come_from_the_runs(result: dict[str, Any]) -> None:
    trace = result["sim"]["traces"]["KTH-SP2-1996-2.swf.gz"]
    lost = trace["interference_bsld"]
    assert lost["none"] == 0.0  # no interference: nothing lost
    assert lost["oblivious"] > 0  # jobs shared nodes and were slowed
    assert result["sim"]["interference_bsld"]["oblivious"] == lost["oblivious"]  # one slice
    runs = trace["runs"]
    assert runs["none"]["mean_run_slowdown"] == 1.0
    assert runs["oblivious"]["mean_run_slowdown"] > 1.0
    assert runs["plugin"]["outcomes_learnt"] > 0 and runs["oblivious"]["outcomes_learnt"] == 0
    assert all(runs[k]["jobs_run"] == trace["jobs"] for k in runs)
    gain = lost["oblivious"] - lost["oracle"]
    if gain > 0:
        share = (lost["oblivious"] - lost["plugin"]) / gain
        assert trace["share_of_oracle_gain"] == pytest.approx(share)


def test_another_seed_draws_other_classes_and_other_figures() -> None:
    one = run_slice(TINY, seed=1)["interference_bsld"]["oblivious"]
    two = run_slice(TINY, seed=2)["interference_bsld"]["oblivious"]
    assert one != two


def test_the_pass_cost_bench_shape() -> None:
    cost = run_dissonance_pass_bench(jobs=600, nodes=80, repeats=2)
    json.dumps(cost)
    assert cost["benchmark"] == "sched-pass-dissonance"
    assert cost["jobs_started_on"] > 0 and cost["off_cpu_min_ms"] > 0
    assert isinstance(cost["overhead_pct"], float)


def test_slices_are_parsed_and_bad_ones_refused(capsys: pytest.CaptureFixture[str]) -> None:
    ns = build_parser().parse_args(
        ["bench", "harmonic-dissonance", "--slices", "A.swf.gz:100:64:4,B.swf.gz:200:32"]
    )
    assert [(s.trace, s.jobs, s.procs, s.cores) for s in ns.slices] == [
        ("A.swf.gz", 100, 64, 4),
        ("B.swf.gz", 200, 32, 8),
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "harmonic-dissonance", "--slices", "A:x:1"])
    assert "TRACE:JOBS:PROCS[:CORES]" in capsys.readouterr().err


def test_live_and_sim_are_each_a_part_alone(capsys: pytest.CaptureFixture[str]) -> None:
    ns = build_parser().parse_args(["bench", "harmonic-dissonance", "--live", "--json"])
    assert ns.live and not ns.sim
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "harmonic-dissonance", "--live", "--sim"])
    assert "not allowed with argument" in capsys.readouterr().err
