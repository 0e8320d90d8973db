"""The backfill stage's CPU with another tree's planning code against this tree's, in one
process, on the ``sched-pass --dissonance`` workload (10,000 jobs x 1,000 nodes,
``hal.bench.dissonance_pass``), with the ``dissonance`` plugin and without it.

Two trees in two processes, one after the other, differ by more than a change to the
stage does on a shared machine. This loads OLD_AVAILABILITY and OLD_PLANNER (another
tree's ``framework/availability.py`` and ``framework/planner.py``, e.g. ``git show
REV:src/hal/scheduler/framework/availability.py > /tmp/availability.py``) beside this
tree's, and before each pass puts either tree's methods on the classes the stage uses
(``AvailabilityProfile``, ``ReleaseLedger``, ``Planner``; this tree's methods the other
lacks stay, uncalled). Four schedulers' passes (without and with the plugin, each with
either code) run in rotating order, each on a new snapshot; the stage is timed by
``time.process_time`` around ``run_backfill``. Prints, as JSON, per scheduler the
stage's median and least CPU with either code, the median of the paired passes' ratios
(new against old) and whether both codes' last plans and reservations are the same::

    PYTHONPATH=src python bench/backfill_stage_compare.py /tmp/availability.py \\
        /tmp/planner.py 40
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from types import FunctionType, ModuleType
from typing import Any

import hal.scheduler.framework.availability as availability
import hal.scheduler.framework.planner as planner
import hal.scheduler.framework.scheduler as scheduler_module
from hal.bench.dissonance_pass import _snapshot, classed_workload, schedulers

CLASSES = (
    (availability, "AvailabilityProfile"),
    (availability, "ReleaseLedger"),
    (planner, "Planner"),
)


def _load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _methods(cls: type) -> dict[str, Any]:
    return {k: v for k, v in vars(cls).items() if isinstance(v, FunctionType | property)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_availability", help="another tree's framework/availability.py")
    parser.add_argument("old_planner", help="another tree's framework/planner.py")
    parser.add_argument("rounds", type=int, help="passes of each scheduler and code")
    ns = parser.parse_args()
    old_modules = {
        availability: _load("backfill_old_availability", ns.old_availability),
        planner: _load("backfill_old_planner", ns.old_planner),
    }
    codes: dict[str, list[tuple[type, dict[str, Any]]]] = {"old": [], "new": []}
    for module, name in CLASSES:
        cls = getattr(module, name)
        codes["new"].append((cls, _methods(cls)))
        codes["old"].append((cls, _methods(getattr(old_modules[module], name))))

    def use(code: str) -> None:
        for cls, methods in codes[code]:
            for attr, fn in methods.items():
                setattr(cls, attr, fn)

    run_backfill: Callable[..., Any] = getattr(scheduler_module, "run_backfill")  # noqa: B009
    spent = [0.0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return run_backfill(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - c0

    setattr(scheduler_module, "run_backfill", timed)  # noqa: B010 (as the pass calls it)
    workload, view = classed_workload(10_000, 1_000, 1)
    off, on = schedulers(len(workload.nodes))
    runs = [
        (label, sched, v, code)
        for label, sched, v in (("off", off, None), ("on", on, view))
        for code in ("old", "new")
    ]
    for _, sched, v, code in runs:  # untimed: what each keeps from pass to pass
        use(code)
        sched.run_pass(_snapshot(workload, 0, v), backfill=True)
    cpu: dict[tuple[str, str], list[float]] = {(r[0], r[3]): [] for r in runs}
    plans: dict[tuple[str, str], str] = {}
    for r in range(ns.rounds):
        for label, sched, v, code in runs[r % 4 :] + runs[: r % 4]:
            use(code)
            running = tuple(workload.running)  # (a new tuple each pass, as the server's)
            snap = _snapshot(dataclasses.replace(workload, running=running), r + 1, v)
            spent[0] = 0.0
            result = sched.run_pass(snap, backfill=True)
            cpu[(label, code)].append(spent[0])
            plans[(label, code)] = repr(result.plan) + repr(sorted(result.reservations.items()))
    use("new")
    out: dict[str, object] = {"rounds": ns.rounds}
    for label in ("off", "on"):
        old, new = cpu[(label, "old")], cpu[(label, "new")]
        ratios = [b / a for a, b in zip(old, new, strict=True)]
        out[label] = {
            "old_median_ms": round(statistics.median(old) * 1000, 2),
            "new_median_ms": round(statistics.median(new) * 1000, 2),
            "old_min_ms": round(min(old) * 1000, 2),
            "new_min_ms": round(min(new) * 1000, 2),
            "new_vs_old_pct_paired_median": round(100.0 * (statistics.median(ratios) - 1), 1),
            "same_plans": plans[(label, "old")] == plans[(label, "new")],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
