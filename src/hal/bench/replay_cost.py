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
the other predictors' replays. ``--trace FILE`` replays another SWF file instead (on
its header's machine, or ``--procs``), and ``--first-jobs K`` only the first K jobs of
each case: a quick look, or a machine too small for the whole cases.
"""

from __future__ import annotations

import multiprocessing
import platform
import resource
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hal.bench import emit, names_from

# A case: (trace file, machine CPUs, cores per node, first jobs). The file is a name in
# ``hal.sim.traces.traces_dir()`` or a path of its own; 0 CPUs: the header's MaxProcs;
# 0 jobs: all of them.
Case = tuple[str, int, int, int]
CASES: dict[str, Case] = {
    "metacentrum": ("METACENTRUM-2009-2.swf.gz", 8_192, 1, 0),
    "curie-230k": ("CEA-Curie-2011-2.1-cln.swf.gz", 80_640, 16, 230_000),
}
PREDICTORS = ("user", "avg2", "learned")
POLICY = "easy-sjbf"
KEEP = ("jobs", "mean_wait_s", "mean_bsld", "utilization", "prediction_mae_s")
TARGETS = {"learned_wall_vs_user": 2.0, "learned_rss_vs_user": 2.0}


def replay_once(case: Case, predictor: str, policy: str = POLICY) -> dict[str, Any]:
    """One replay of ``case`` (a ``CASES`` value), in this process (``run_case`` calls
    it in a fresh one)."""
    from hal.sim.cluster import ClusterModel
    from hal.sim.engine import Simulation
    from hal.sim.metrics import summarize
    from hal.sim.policies import scheduler_for
    from hal.sim.run import make_predictor
    from hal.sim.traces import trace_file
    from hal.sim.workload import Cleaning, load_workload

    file, procs, cores, first_jobs = case
    path = Path(file) if Path(file).is_absolute() else trace_file(file)
    workload = load_workload(path, Cleaning(procs=procs or None, first_jobs=first_jobs))
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
        procs=workload.machine_procs,
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
        "procs": procs or next(iter(runs.values()))["procs"],
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
    cases: Mapping[str, Case],
    predictors: tuple[str, ...] = ("user", "learned"),
    policy: str = POLICY,
) -> dict[str, Any]:
    """``cases``: name → case, e.g. ``CASES``."""
    out: dict[str, Any] = {
        "benchmark": "replay-cost",
        "cpu_model": cpu_model(),
        "cpus": multiprocessing.cpu_count(),
        "cases": {name: run_case(case, predictors, policy) for name, case in cases.items()},
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
        "replay-cost",
        help="learned vs user replays of big traces: wall time and peak memory",
        description=f"Replays each case ({POLICY}) once per predictor, one after the other,"
        " each in a fresh process, and reports per replay its wall and CPU seconds, peak"
        " RSS and schedule figures, per case the learned/user ratios, and the CPU model.",
    )
    p.add_argument(
        "--cases",
        type=names_from(CASES),
        default=list(CASES),
        help=f"of {', '.join(CASES)} (default all)",
    )
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="an SWF file (.swf or .swf.gz) to replay instead of the cases",
    )
    p.add_argument(
        "--procs", type=int, help="with --trace: the machine's CPUs (default the header's MaxProcs)"
    )
    p.add_argument(
        "--cores-per-node", type=int, default=1, help="with --trace: CPUs per node (default 1)"
    )
    p.add_argument(
        "--first-jobs",
        type=int,
        default=0,
        metavar="K",
        help="replay only the first K jobs of each case or of --trace (default: the case's"
        " own count; all of --trace's)",
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


def chosen_cases(ns: Any) -> dict[str, Case]:
    """The cases the options name: ``--trace`` or ``--cases``, cut to ``--first-jobs``."""
    if ns.first_jobs < 0:
        raise SystemExit(
            f"hal bench replay-cost: --first-jobs takes a count of jobs, not {ns.first_jobs}"
        )
    if ns.trace is None:
        if ns.procs is not None or ns.cores_per_node != 1:
            raise SystemExit(
                "hal bench replay-cost: --procs and --cores-per-node describe the machine"
                " of --trace; the named cases have their own"
            )
        cases = {name: CASES[name] for name in ns.cases}
        return {
            name: (file, procs, cores, ns.first_jobs or first)
            for name, (file, procs, cores, first) in cases.items()
        }
    path = Path(ns.trace).resolve()
    if not path.is_file():
        raise SystemExit(f"hal bench replay-cost: no trace {ns.trace} (--trace takes an SWF file)")
    return {path.name: (str(path), ns.procs or 0, ns.cores_per_node, ns.first_jobs)}


def _cmd(ns: Any) -> int:
    cases = chosen_cases(ns)
    return emit(run_replay_cost_bench(cases, tuple(ns.predictors), ns.policy), ns.json)
