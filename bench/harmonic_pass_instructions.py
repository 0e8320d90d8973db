"""The ``hal bench sched-pass --harmonic`` workload's pass, for counting instructions.

Builds the 10,000 jobs x 1,000 nodes workload and its traffic graph, warms both
schedulers (without the plugin, with it) with one pass each, then runs PASSES more of
one of them. Run it under callgrind with 0 and with 3 passes: the difference over 3 is
one pass's instructions, steady on a shared machine where CPU time varies by 15 %::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python bench/harmonic_pass_instructions.py off 0    # (then off 3, on 3)

(about 10 G instructions for the set-up; a pass is about 0.75 G).
"""

from __future__ import annotations

import argparse

from hal.bench.harmonic_pass import _snapshot, schedulers, traffic_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("off", "on"))
    parser.add_argument("passes", type=int)
    ns = parser.parse_args()
    workload, traffic = traffic_workload(10_000, 1_000, 1)
    off, on = schedulers(len(workload.nodes))
    off.run_pass(_snapshot(workload, 0, None), backfill=True)
    on.run_pass(_snapshot(workload, 0, traffic), backfill=True)
    scheduler, view = (on, traffic) if ns.mode == "on" else (off, None)
    for r in range(ns.passes):
        scheduler.run_pass(_snapshot(workload, r + 1, view), backfill=True)


if __name__ == "__main__":
    main()
