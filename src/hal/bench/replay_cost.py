"""``hal bench replay-cost``: what the learned predictor costs a trace replay, against the
same replay with the requested times (``user``), side by side in one run.

Each replay (``easy-sjbf``, the policy the learned predictor is meant for, with the
predictor's default correction, as ``hal sim run``) runs in a fresh process of its own,
started with ``spawn``, so that its peak resident memory (``ru_maxrss``) is its own and
not its parent's or another replay's; they run one after the other. Per replay: wall
and CPU seconds of the replay itself (loading the trace left out), the process's peak
RSS, and the schedule's figures (mean wait, mean bounded slowdown, prediction MAE); per
case the ratios of ``learned`` to ``user`` (the targets: wall time ≤ 2×, peak memory
within about 2×; the CPU-time ratio beside the wall-time one, for a machine shared
with other work) and the CPU model.

The cases are the traces the costs were reported on: METACENTRUM (its 99,944 jobs after
cleaning; the file names no machine size, replayed on 8,192 CPUs) and the first 230,000
jobs of CEA-Curie (80,640 cores, 16 per node). ``--predictors user,avg2,learned`` adds
the other predictors' replays.
"""

from __future__ import annotations

import multiprocessing
import platform
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from hal.bench import emit, names_from

# name → (trace file, machine CPUs, cores per node, first jobs; 0: all)
CASES: dict[str, tuple[str, int, int, int]] = {
    "metacentrum": ("METACENTRUM-2009-2.swf.gz", 8_192, 1, 0),
    "curie-230k": ("CEA-Curie-2011-2.1-cln.swf.gz", 80_640, 16, 230_000),
}
PREDICTORS = ("user", "avg2", "learned")
POLICY = "easy-sjbf"
KEEP = ("jobs", "mean_wait_s", "mean_bsld", "utilization", "prediction_mae_s")
TARGETS = {"learned_wall_vs_user": 2.0, "learned_rss_vs_user": 2.0}


Case = tuple[str, int, int, int]


def replay_once(case: Case, predictor: str, policy: str = POLICY) -> dict[str, Any]:
    """One replay of ``case`` (a ``CASES`` value), in this process (``run_case`` calls
    it in a fresh one)."""
    from hal.sim.cluster import ClusterModel
    from hal.sim.engine import Simulation
    from hal.sim.metrics import summarize
    from hal.sim.policies import scheduler_for
    from hal.sim.run import make_predictor
    from hal.sim.traces import traces_dir
    from hal.sim.workload import Cleaning, load_workload

    file, procs, cores, first_jobs = case
    workload = load_workload(traces_dir() / file, Cleaning(procs=procs, first_jobs=first_jobs))
    chosen = make_predictor(predictor, workload)
    simulation = Simulation(
        workload.jobs,
        ClusterModel.for_procs(workload.machine_procs, cores),
        scheduler_for(policy, chosen),
        predictor=chosen,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    run = simulation.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = summarize(run)
    out: dict[str, Any] = {k: round(float(summary[k]), 4) for k in KEEP if k in summary}
    out.update(
        wall_s=round(wall, 2),
        cpu_s=round(cpu, 2),
        # Linux reports ru_maxrss in KiB
        peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )
    return out


def _in_fresh_process(case: Case, predictor: str, policy: str) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(replay_once, case, predictor, policy).result()


def run_case(
    case: Case, predictors: tuple[str, ...] = ("user", "learned"), policy: str = POLICY
) -> dict[str, Any]:
    """The replays of ``case``, one after the other, each in a fresh process."""
    runs = {p: _in_fresh_process(case, p, policy) for p in predictors}
    file, procs, cores, first_jobs = case
    out: dict[str, Any] = {
        "trace": file,
        "procs": procs,
        "cores_per_node": cores,
        "first_jobs": first_jobs or None,
        "policy": policy,
        "runs": runs,
    }
    if "user" in runs and "learned" in runs:
        user, learned = runs["user"], runs["learned"]
        out["learned_wall_vs_user"] = round(learned["wall_s"] / max(user["wall_s"], 1e-9), 2)
        # the same in CPU seconds: what a machine shared with other work still measures
        out["learned_cpu_vs_user"] = round(learned["cpu_s"] / max(user["cpu_s"], 1e-9), 2)
        out["learned_rss_vs_user"] = round(
            learned["peak_rss_mib"] / max(user["peak_rss_mib"], 1e-9), 2
        )
    return out


def cpu_model() -> str:
    """The CPU as docs/benchmarks.md names machines: "AMD EPYC, family 23 model 1"."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break  # the first processor's
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name}, family {fields['cpu family']} model {fields['model']}"
    return name


def run_replay_cost_bench(
    cases: list[str], predictors: tuple[str, ...] = ("user", "learned"), policy: str = POLICY
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "benchmark": "replay-cost",
        "cpu_model": cpu_model(),
        "cpus": multiprocessing.cpu_count(),
        "cases": {case: run_case(CASES[case], predictors, policy) for case in cases},
        "targets": TARGETS,
    }
    out["met"] = {
        key: all(c.get(key, 0.0) <= limit for c in out["cases"].values())
        for key, limit in TARGETS.items()
    }
    return out


def add_commands(bsub: Any) -> None:
    """Registers ``replay-cost`` on the ``hal bench`` subparsers (``cli/bench.py``)."""
    from hal.sim.policies import POLICIES

    p = bsub.add_parser(
        "replay-cost", help="learned vs user replays of big traces: wall time and peak memory"
    )
    p.add_argument(
        "--cases", type=names_from(CASES), default=list(CASES), help=f"of {', '.join(CASES)}"
    )
    p.add_argument(
        "--predictors",
        type=names_from(PREDICTORS),
        default=["user", "learned"],
        help=f"of {', '.join(PREDICTORS)} (default user,learned)",
    )
    p.add_argument("--policy", default=POLICY, choices=POLICIES)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    return emit(run_replay_cost_bench(ns.cases, tuple(ns.predictors), ns.policy), ns.json)
