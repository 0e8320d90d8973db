"""The ``hal bench sched-pass --dissonance`` workload's pass, for counting instructions.

Builds the 10,000 jobs x 1,000 nodes workload with classed running jobs and the
interference view, warms both schedulers (without the plugin, with it) with one pass
each, then runs PASSES more of one of them, each on a new snapshot as the bench does.
Run it under callgrind with 0 and with 3 passes: the difference over 3 is one pass's
instructions, steady on a shared machine where CPU time varies by 15 %. ``neutral`` runs
the plugin on a matrix where nothing clashes (every score 100): the same placements as
``off``, no notes, so ``neutral`` less ``off`` is the plugin's own work::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python bench/dissonance_pass_instructions.py off 0    # (then off 3, on 3, neutral 3)
"""

from __future__ import annotations

import argparse
import dataclasses

from hal.bench.dissonance_pass import _snapshot, classed_workload, schedulers
from hal.core.profiles import CLASSES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("off", "on", "neutral"))
    parser.add_argument("passes", type=int)
    ns = parser.parse_args()
    workload, view = classed_workload(10_000, 1_000, 1)
    off, on = schedulers(len(workload.nodes))
    off.run_pass(_snapshot(workload, 0, None), backfill=True)
    on.run_pass(_snapshot(workload, 0, view), backfill=True)
    calm = {c: dict.fromkeys(CLASSES, 1.0) for c in CLASSES}
    neutral = dataclasses.replace(view, slowdown=calm)
    scheduler, v = {"on": (on, view), "neutral": (on, neutral), "off": (off, None)}[ns.mode]
    for r in range(ns.passes):
        fresh = dataclasses.replace(workload, running=tuple(workload.running))
        scheduler.run_pass(_snapshot(fresh, r + 1, v), backfill=True)


if __name__ == "__main__":
    main()
