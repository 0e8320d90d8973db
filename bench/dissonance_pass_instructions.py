"""The ``hal bench sched-pass --dissonance`` workload's pass, for counting instructions.

Builds the 10,000 jobs x 1,000 nodes workload with classed running jobs and the
interference view, warms both schedulers (without the plugin, with it) with one pass
each, then runs PASSES more of one of them, each on a new snapshot as the bench does.
Run it under callgrind with 0 and with 3 passes: the difference over 3 is one pass's
instructions, steady on a shared machine where CPU time varies by 15 %. ``neutral`` runs
the plugin on a matrix where nothing clashes (every score 100): the same placements as
``off``, no notes; every key is then scored by one number and Reserve keeps nothing for
a job scored and placed on one node (a young model's case; a job on several nodes is
still added to the pass's shares), so ``neutral`` less ``off`` is the plugin's cheapest
path. ``cold`` runs ``on`` with nothing kept from an earlier pass: no row's scores, no
pending job's key (``MIXES_KEPT`` and ``KEYS_KEPT`` 0) and the matrix's coefficients
worked out again (``_coef_of`` dropped before each pass), as in the first pass after
the model changed::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python bench/dissonance_pass_instructions.py off 0    # (then off 3, on 3, neutral 3...)

``--gate PATH`` counts the passes alone, and faster (the workload is built at valgrind's
plain speed): the snapshots are made first, the heap frozen (``gc.freeze``: a full
collection of the workload's objects would land in one run and not in another), then
PATH.ready written and PATH.go waited for. Run under ``--instr-atstart=no`` and switch
the counting on in between; "Collected" is then the passes' instructions::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \\
        --callgrind-out-file=/dev/null python bench/dissonance_pass_instructions.py \\
        on 3 --gate /tmp/g &
    until [ -e /tmp/g.ready ]; do sleep 1; done
    callgrind_control -i on $! && touch /tmp/g.go && wait
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import pathlib
import time

from hal.bench.dissonance_pass import _snapshot, classed_workload, schedulers
from hal.core.profiles import CLASSES
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins.dissonance import plugin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("off", "on", "neutral", "cold"))
    parser.add_argument("passes", type=int)
    parser.add_argument("--gate", help="PATH: write PATH.ready, wait for PATH.go")
    ns = parser.parse_args()
    workload, view = classed_workload(10_000, 1_000, 1)
    off, on = schedulers(len(workload.nodes))
    off.run_pass(_snapshot(workload, 0, None), backfill=True)
    on.run_pass(_snapshot(workload, 0, view), backfill=True)
    calm = {c: dict.fromkeys(CLASSES, 1.0) for c in CLASSES}
    neutral = dataclasses.replace(view, slowdown=calm)
    if ns.mode == "cold":
        plugin.MIXES_KEPT = 0  # (each pass's first Score drops the mixes kept before)
        plugin.KEYS_KEPT = 0  # (and each Score the pending jobs' keys)
    modes = {"on": (on, view), "cold": (on, view), "neutral": (on, neutral), "off": (off, None)}
    scheduler, v = modes[ns.mode]
    kept = [p for p, _ in scheduler.profile.score if isinstance(p, plugin.Dissonance)]

    def run(snap: ClusterSnapshot) -> None:
        if ns.mode == "cold":
            for p in kept:
                p._coef_of = None  # (the coefficients worked out again, as for a new view)
        scheduler.run_pass(snap, backfill=True)

    if ns.gate:
        snaps = [
            _snapshot(dataclasses.replace(workload, running=tuple(workload.running)), r + 1, v)
            for r in range(ns.passes)
        ]
        gc.collect()
        gc.freeze()
        pathlib.Path(f"{ns.gate}.ready").touch()
        while not pathlib.Path(f"{ns.gate}.go").exists():
            time.sleep(0.05)
        for snap in snaps:
            run(snap)
        return
    for r in range(ns.passes):
        fresh = dataclasses.replace(workload, running=tuple(workload.running))
        run(_snapshot(fresh, r + 1, v))


if __name__ == "__main__":
    main()
