"""``make bench``: run every benchmark and write one JSON file each to bench/results/.

Each result carries its own comparison baseline measured in the same run (see
docs/benchmarks.md for the figures and how to read them). Select some with
``python bench/run_all.py submit idle``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _submit() -> dict[str, Any]:
    from hal.bench.submit import run_submit_bench

    return run_submit_bench()


def _idle() -> dict[str, Any]:
    from hal.bench.idle import run_idle_bench

    return run_idle_bench()


def _e2e() -> dict[str, Any]:
    from hal.bench.e2e import run_e2e_bench

    return run_e2e_bench()


def _cache() -> dict[str, Any]:
    from hal.bench.cache import run_cache_bench

    return run_cache_bench()


def _sim() -> dict[str, Any]:
    from hal.bench.sim import CASES, run_sim_bench
    from hal.sim.parallel import default_workers

    return run_sim_bench(list(CASES), workers=default_workers())


def _predict() -> dict[str, Any]:
    from hal.bench.predict import TRACES, run_predict_bench

    # The two largest traces are cut to their first 50,000 jobs to keep `make bench` in
    # reach of a 2-core machine; `hal bench predict --json` runs them whole.
    cut = {"hpc2n": 50_000, "cea-curie": 50_000}
    return run_predict_bench(list(TRACES), cut)


def _replay_cost() -> dict[str, Any]:
    from hal.bench.replay_cost import CASES, run_replay_cost_bench

    return run_replay_cost_bench(CASES)


def _htc() -> dict[str, Any]:
    from hal.bench.htc import run_htc_bench

    return run_htc_bench()


def _topology() -> dict[str, Any]:
    from hal.bench.topology import run_topology_bench

    return run_topology_bench()


def _fragmentation() -> dict[str, Any]:
    from hal.bench.fragmentation import run_fragmentation_bench

    return run_fragmentation_bench()


def _sched_pass() -> dict[str, Any]:
    from hal.bench.sched_pass import run_targets

    # The two target points of issue 3; `hal bench sched-pass --curve` runs the grid.
    return run_targets()


def _agent_traffic() -> dict[str, Any]:
    from hal.bench.agent_traffic import run_agent_traffic_bench

    return run_agent_traffic_bench()


def _data() -> dict[str, Any]:
    from hal.bench.data import run_data_bench

    return run_data_bench()


def _harmonic() -> dict[str, Any]:
    from hal.bench.harmonic import run_harmonic_bench

    return run_harmonic_bench()


BENCHMARKS: dict[str, Callable[[], dict[str, Any]]] = {
    "submit": _submit,
    "idle": _idle,
    "e2e-vs-slurm": _e2e,
    "cache": _cache,
    "sim": _sim,
    "predict": _predict,
    "replay-cost": _replay_cost,
    "htc": _htc,
    "topology": _topology,
    "fragmentation": _fragmentation,
    "sched-pass": _sched_pass,
    "data": _data,
    "agent-traffic": _agent_traffic,
    "harmonic": _harmonic,
}


def main(names: list[str]) -> int:
    RESULTS.mkdir(exist_ok=True)
    chosen = names or list(BENCHMARKS)
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}", file=sys.stderr)
        return 2
    failed = 0
    for name in chosen:
        print(f"== {name}", flush=True)
        started = time.time()
        try:
            result = BENCHMARKS[name]()
        except Exception as err:  # one broken benchmark must not hide the others
            result = {"benchmark": name, "error": f"{err.__class__.__name__}: {err}"}
            failed += 1
        result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        out = RESULTS / f"{name}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
