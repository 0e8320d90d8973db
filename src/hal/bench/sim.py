"""``hal bench sim``: simulator speed on real traces, beside AccaSim in the same run.

Replays SDSC-SP2 (59,715 jobs, 128 CPUs) and CEA-Curie (312,826 jobs, the 80,640 thin
cores as 5,040 nodes of 16) with EASY and reports wall time and jobs per second. The
peer is AccaSim (PyPI ``accasim``), installed into a throwaway virtual environment with
its own interpreter: AccaSim 1.1.3 imports ``collections.Mapping``, which Python 3.10
removed, so it cannot run on HAL's Python unmodified; with a memory resource configured it
divides by the jobs' zero memory requests, so the peer runs with cores only. When no
suitable interpreter or package index is reachable, the reason is recorded in the JSON
instead of a number.

Targets (issue 4): SDSC-SP2 ≤ 30 s, CEA-Curie ≤ 5 min.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hal.bench import names_from
from hal.sim.traces import trace_file, traces_dir

TRACES = traces_dir()
CASES = {
    "sdsc-sp2": ("SDSC-SP2-1998-4.2-cln.swf.gz", None, 1, 30.0),
    "cea-curie": ("CEA-Curie-2011-2.1-cln.swf.gz", 80_640, 16, 300.0),
}
ACCASIM_PYTHONS = ("python3.9", "python3.8")  # interpreters AccaSim 1.1.3 runs on

_ACCASIM_RUN = """
import sys, time
from accasim.base.simulator_class import Simulator
from accasim.base.scheduler_class import EASYBackfilling
from accasim.base.allocator_class import FirstFit
t = time.perf_counter()
sim = Simulator(sys.argv[1], sys.argv[2], EASYBackfilling(FirstFit()),
                scheduling_output=False, statistics_output=False, show_statistics=False,
                results_folder=sys.argv[3])
sim.start_simulation(system_status=False, debug=False)
print("WALL", time.perf_counter() - t)
"""


def run_hal(case: str, first_jobs: int = 0, workers: int = 1) -> dict[str, Any]:
    from hal.sim import Cleaning, SimOptions, load_workload, run_workload

    name, procs, cores, target = CASES[case]
    path = trace_file(name, TRACES)
    t0 = time.perf_counter()
    workload = load_workload(path, Cleaning(procs=procs, first_jobs=first_jobs))
    load_s = time.perf_counter() - t0
    options = SimOptions(
        policy="easy", cores_per_node=cores, exclude_first_fraction=0.01, workers=workers
    )
    _, summary = run_workload(workload, options)
    total = time.perf_counter() - t0
    return {
        "trace": name,
        "jobs": len(workload.jobs),
        "nodes": summary["nodes"],
        "cores_per_node": cores,
        "load_s": round(load_s, 2),
        "simulate_s": round(summary["wall_s"], 2),
        "wall_s": round(total, 2),
        # processes the replay ran on, where they handed over, the CPU they all spent
        # (None on one process: not measured apart from the wall time)
        "workers": summary["workers"],
        "handovers": summary.get("handovers", []),
        "simulate_cpu_s": round(summary["cpu_s"], 2) if "cpu_s" in summary else None,
        "jobs_per_s": round(len(workload.jobs) / total, 1),
        "target_s": target,
        "meets_target": total <= target if not first_jobs else None,  # whole traces only
        "mean_wait_s": round(summary["mean_wait_s"], 1),
        "mean_bsld": round(summary["mean_bsld"], 2),
        "passes": summary["passes"],
    }


def _accasim_python() -> str | None:
    """The first interpreter AccaSim runs on that actually starts: on PATH, then in
    pyenv's versions (pyenv's shim for python3.9 is on PATH but exits 127 while the
    global version is another)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    on_path = [shutil.which(name) for name in ACCASIM_PYTHONS]
    candidates = [found for found in on_path if found]
    for name in ACCASIM_PYTHONS:
        version = name.removeprefix("python")
        candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/{name}"))
    return next((found for found in candidates if _starts(found)), None)


def _starts(python: str) -> bool:
    try:
        subprocess.run([python, "-c", "pass"], check=True, capture_output=True, timeout=60)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def run_accasim(case: str, first_jobs: int = 0, timeout_s: float = 900.0) -> dict[str, Any]:
    """AccaSim's EASYBackfilling + FirstFit on the same trace (one core per node group,
    the machine's CPU count as resources)."""
    name, procs, cores, _ = CASES[case]
    python = _accasim_python()
    if python is None:
        return {
            "ran": False,
            "why": "AccaSim 1.1.3 needs Python <= 3.9 (it imports "
            "collections.Mapping); no python3.9/3.8 interpreter found",
        }
    with tempfile.TemporaryDirectory(prefix="hal-accasim-") as tmp:
        work = Path(tmp)
        env = work / "venv"
        try:
            subprocess.run([python, "-m", "venv", str(env)], check=True, capture_output=True,
                           timeout=300)  # fmt: skip
            subprocess.run([str(env / "bin" / "pip"), "install", "-q", "accasim"], check=True,
                           capture_output=True, timeout=600)  # fmt: skip
        except (subprocess.SubprocessError, OSError) as err:
            return {"ran": False, "why": f"could not install accasim: {err}"}
        trace = work / "trace.swf"
        total_procs = procs or 0
        with gzip.open(trace_file(name, TRACES), "rt") as src, trace.open("w") as dst:
            kept = 0
            for line in src:
                if line.startswith(";"):
                    if not total_procs and line.startswith("; MaxProcs:"):
                        total_procs = int(line.split(":")[1])
                    continue
                f = line.split()
                # AccaSim divides by each requested quantity: give it only jobs that
                # ran and have a size (the cleaning HAL applies too).
                if len(f) != 18 or float(f[3]) <= 0 or max(int(f[4]), int(f[7])) <= 0:
                    continue
                dst.write(line)
                kept += 1
                if first_jobs and kept >= first_jobs:
                    break
        # One group of ``cores``-core nodes; AccaSim allocates cores per node.
        config = {"groups": {"g0": {"core": cores}},
                  "resources": {"g0": total_procs // cores}, "equivalence": {},
                  "start_time": 0}  # fmt: skip
        (work / "sys.json").write_text(json.dumps(config))
        (work / "run.py").write_text(_ACCASIM_RUN)
        t0 = time.perf_counter()
        try:
            out = subprocess.run(
                [str(env / "bin" / "python"), "run.py", str(trace), "sys.json", str(work / "o")],
                cwd=work, capture_output=True, text=True, timeout=timeout_s, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"ran": False, "why": f"did not finish within {timeout_s:.0f} s"}
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            return {"ran": False, "why": (out.stderr or out.stdout).strip().splitlines()[-1:]}
        return {"ran": True, "python": python, "jobs": kept, "wall_s": round(wall, 2),
                "jobs_per_s": round(kept / wall, 1)}  # fmt: skip


def run_sim_bench(
    cases: list[str], with_accasim: bool = True, first_jobs: int = 0, workers: int = 1
) -> dict[str, Any]:
    result: dict[str, Any] = {"python": sys.version.split()[0], "cases": {}}
    for case in cases:
        entry: dict[str, Any] = {"hal": run_hal(case, first_jobs, workers)}
        if with_accasim:
            entry["accasim"] = run_accasim(case, first_jobs)
            acc = entry["accasim"]
            if acc.get("ran"):
                entry["hal_speedup"] = round(acc["wall_s"] / entry["hal"]["wall_s"], 2)
        result["cases"][case] = entry
    return result


def add_commands(bsub: Any) -> None:
    """Registers ``sim`` on the ``hal bench`` subparsers (wired in ``cli/bench.py``)."""
    p = bsub.add_parser("sim", help="simulator speed on SDSC-SP2 and CEA-Curie vs AccaSim")
    p.add_argument("--cases", type=names_from(CASES), default=list(CASES))
    p.add_argument("--skip-accasim", action="store_true")
    p.add_argument("--first-jobs", type=int, default=0, help="cut traces (smoke runs)")
    p.add_argument(
        "--workers",
        type=int,
        help="most processes HAL replays on (default 4 with two cores or more; see hal sim run)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    from hal.sim.parallel import default_workers

    workers = default_workers() if ns.workers is None else ns.workers
    result = run_sim_bench(ns.cases, not ns.skip_accasim, ns.first_jobs, workers)
    print(json.dumps(result, indent=2))
    return 0
