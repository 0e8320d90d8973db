"""Two versions of the ``dissonance`` plugin against the pass without it, in one process.

``hal bench sched-pass --dissonance`` compares the pass with the plugin and without it in
one process, but two trees only in two processes, run one after the other: on a shared
machine at load 7-10 their least CPU times move by more than a change to the plugin
does. This runs three schedulers on the ``sched-pass --dissonance`` workload (10,000
jobs x 1,000 nodes, ``hal.bench.dissonance_pass``) in one process, each pass on a new
snapshot, in rotating order: without the plugin, with the plugin module at OLD_PLUGIN
(another tree's ``plugin.py``, e.g. ``git show REV:src/hal/scheduler/plugins/dissonance/
plugin.py > /tmp/old.py``), and with this tree's. It prints, as JSON, each plugin's
overhead by least CPU time and by the median of the paired passes' ratios, the new
plugin's CPU against the old one's (median of the paired ratios), and whether both
plugins' last plans (placements and notes) are the same. ``--neutral`` gives both
plugins a matrix where nothing clashes (every score 100; as
``dissonance_pass_instructions.py neutral``; each plugin takes its cheapest path
there). ``--calls`` also times each plugin's own calls (Score, and Reserve with
Unreserve; ``time.perf_counter`` around each, which adds its own cost to both plugins'
passes) and prints their medians per pass::

    PYTHONPATH=src python bench/dissonance_pass_compare.py /tmp/old.py 41
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

import hal.scheduler.plugins.dissonance as package
from hal.bench.dissonance_pass import _snapshot, classed_workload, schedulers
from hal.core.profiles import CLASSES
from hal.scheduler.plugins.dissonance import plugin as this_plugin

_CALLS = (("weighted_score", "score"), ("reserve", "reserve"), ("unreserve", "reserve"))


def _timed(cls: type, spent: dict[str, float]) -> None:
    """Wrap ``cls``'s Score, Reserve and Unreserve so that ``spent`` adds up their
    seconds (before the scheduler is built: the runtime keeps the bound methods)."""
    for method, label in _CALLS:
        call: Callable[..., object] = getattr(cls, method)

        def timed(
            *args: object, _call: Callable[..., object] = call, _label: str = label
        ) -> object:
            t0 = time.perf_counter()
            try:
                return _call(*args)
            finally:
                spent[_label] += time.perf_counter() - t0

        setattr(cls, method, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_plugin", help="another tree's dissonance plugin.py")
    parser.add_argument("rounds", type=int, help="passes of each scheduler")
    parser.add_argument("--neutral", action="store_true", help="a matrix where nothing clashes")
    parser.add_argument("--calls", action="store_true", help="time each plugin's own calls")
    ns = parser.parse_args()
    spec = importlib.util.spec_from_file_location("dissonance_old_plugin", ns.old_plugin)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {ns.old_plugin}")
    old_module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old_module
    spec.loader.exec_module(old_module)
    spent = {name: {"score": 0.0, "reserve": 0.0} for name in ("old", "new")}
    if ns.calls:
        _timed(old_module.Dissonance, spent["old"])
        _timed(this_plugin.Dissonance, spent["new"])
    workload, view = classed_workload(10_000, 1_000, 1)
    if ns.neutral:
        view = dataclasses.replace(view, slowdown={c: dict.fromkeys(CLASSES, 1.0) for c in CLASSES})
    off, new = schedulers(len(workload.nodes))
    current = package.new
    package.new = old_module.new  # (``default_registry`` reads it when called)
    try:
        _, old = schedulers(len(workload.nodes))
    finally:
        package.new = current
    runs = {"off": (off, None), "old": (old, view), "new": (new, view)}
    for scheduler, v in runs.values():  # untimed: what each keeps from pass to pass
        scheduler.run_pass(_snapshot(workload, 0, v), backfill=True)
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    calls: dict[str, dict[str, list[float]]] = {
        name: {"score": [], "reserve": []} for name in spent
    }
    plans = {}
    names = list(runs)
    for r in range(ns.rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            scheduler, v = runs[name]
            running = tuple(workload.running)  # (a new tuple each pass, as the server's)
            snap = _snapshot(dataclasses.replace(workload, running=running), r + 1, v)
            own = spent.get(name, {})
            for label in own:
                own[label] = 0.0
            c0 = time.process_time()
            plans[name] = scheduler.run_pass(snap, backfill=True).plan
            cpu[name].append(time.process_time() - c0)
            for label, seconds in own.items():
                calls[name][label].append(seconds)

    def placed(name: str) -> list[tuple[int, tuple[str, ...], str]]:
        return [(p.job_id, p.allocation.nodes, p.note) for p in plans[name].placements]

    def paired(a: str, b: str) -> float:
        ratios = [y / x for x, y in zip(cpu[a], cpu[b], strict=True)]
        return round(100.0 * (statistics.median(ratios) - 1), 2)

    out: dict[str, object] = {
        "rounds": ns.rounds,
        "neutral": ns.neutral,
        "same_plans": placed("old") == placed("new"),
    }
    for name in ("old", "new"):
        out[f"{name}_overhead_pct"] = round(100.0 * (min(cpu[name]) / min(cpu["off"]) - 1), 2)
        out[f"{name}_overhead_pct_paired_median"] = paired("off", name)
    out["new_vs_old_pct_paired_median"] = paired("old", "new")
    for name, times in cpu.items():
        out[f"{name}_cpu_min_ms"] = round(min(times) * 1000, 2)
        out[f"{name}_cpu_median_ms"] = round(statistics.median(times) * 1000, 2)
    if ns.calls:
        for name, by_label in calls.items():
            for label, per_pass in by_label.items():
                out[f"{name}_{label}_ms_median"] = round(statistics.median(per_pass) * 1000, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
