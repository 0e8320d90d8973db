"""The scheduling pass on a thread beside a busy one, as the server runs it beside its
event loop: how much longer than its CPU the pass takes, at several switch intervals.

The ``sched-pass`` workload (10,000 jobs x 1,000 nodes, ``hal.bench.dissonance_pass``,
without the ``dissonance`` plugin) is passed ``--rounds`` times per interval on a thread
of its own, while another thread plays the loop: as much Python work as takes
``--busy-ms`` alone, then ``--idle-ms`` asleep (a request's work, then its wait on the
network), over and over. The intervals take turns within each round; the figures need a
quiet machine (other processes on the cores blur them). Each pass sets
``sys.setswitchinterval`` on its start and puts 5 ms back at its end. Prints one JSON
object: per interval, the median of the passes' wall time over their thread's CPU, and
the loop thread's p99 lateness waking from its sleeps.

A pass lets the interpreter go at every numpy call over 500 elements (about 15,500 a
pass here), and each time the other thread may take it: the interval is how long the
pass then waits before asking for it back::

    PYTHONPATH=src python bench/pass_beside_loop.py [--intervals 0.005 0.001 0.0002]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time

from hal.bench.dissonance_pass import _snapshot, classed_workload, schedulers
from hal.bench.replay_cost import cpu_model
from hal.scheduler.framework import ClusterSnapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.005, 0.001, 0.0002])
    parser.add_argument("--rounds", type=int, default=6, help="passes per interval")
    parser.add_argument("--busy-ms", type=float, default=3.0)
    parser.add_argument("--idle-ms", type=float, default=2.0)
    ns = parser.parse_args()
    workload, _ = classed_workload(10_000, 1_000, 1)
    scheduler, _ = schedulers(len(workload.nodes))
    scheduler.run_pass(_snapshot(workload, 0, None), backfill=True)  # (warm)
    idle = ns.idle_ms / 1000
    steps = _steps_for(ns.busy_ms / 1000)  # (a fixed amount of work: ``busy_ms`` alone)
    stop = threading.Event()
    # the loop's lateness waking from each sleep, by the interval of the pass then running
    lateness: dict[float, list[float]] = {interval: [] for interval in ns.intervals}
    running_at: list[float | None] = [None]

    def loop() -> None:
        while not stop.is_set():
            for _ in range(steps):
                sum(range(200))
            slept = time.perf_counter()
            time.sleep(idle)
            at = running_at[0]
            if at is not None:
                lateness[at].append(time.perf_counter() - slept - idle)

    threading.Thread(target=loop, daemon=True).start()

    def one_pass(snap: ClusterSnapshot, interval: float, timed: list[float]) -> None:
        sys.setswitchinterval(interval)
        running_at[0] = interval
        cpu, wall = time.thread_time(), time.perf_counter()
        scheduler.run_pass(snap, backfill=True)
        timed.append((time.perf_counter() - wall) / (time.thread_time() - cpu))
        running_at[0] = None
        sys.setswitchinterval(0.005)

    ratios: dict[float, list[float]] = {interval: [] for interval in ns.intervals}
    for r in range(ns.rounds):  # (the intervals in turn each round: a load's drift on all)
        for n, interval in enumerate(ns.intervals):
            running = tuple(workload.running)
            snap = _snapshot(dataclasses.replace(workload, running=running), r * 100 + n + 1, None)
            worker = threading.Thread(target=one_pass, args=(snap, interval, ratios[interval]))
            worker.start()
            worker.join()
    out: dict[str, object] = {"cpu_model": cpu_model(), "busy_ms": ns.busy_ms}
    for interval in ns.intervals:
        late = sorted(lateness[interval])
        out[str(interval)] = {
            "wall_over_cpu": round(statistics.median(ratios[interval]), 2),
            "loop_late_p99_ms": round(late[int(0.99 * (len(late) - 1))] * 1000, 2),
        }
    stop.set()
    print(json.dumps(out))


def _steps_for(seconds: float) -> int:
    """How many ``sum(range(200))`` take ``seconds`` on this machine, alone."""
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.2:
        sum(range(200))
        n += 1
    return max(1, round(n * seconds / 0.2))


if __name__ == "__main__":
    main()
