"""What deciding a pass in a forked process costs beside deciding it on the thread
(ADR 0031), at ``hal bench scale``'s size without its server: ``bench/pass_stages.py``'s
cluster (N nodes of 16 CPUs, the nodes full of running jobs, P pending jobs of the
scale bench's mix) and the server's own scheduler for that config.

The scheduler first runs two passes on the main thread (the second with what the first
left: the running jobs' ledger, the plugins' caches). Then, each in a child forked from
that warm process, the same pass: as forked (``warm``), with the running jobs' ledger
made afresh (``ledger-cold``: a server whose passes are all forked never warms its
own), with the plugins made afresh (``plugins-cold``), and with the whole scheduler made
afresh (``all-cold``). Last, the server's way, a ``ForkedScheduler`` over a scheduler
made afresh: its first pass (``forked-first``, cold) and the next (``forked-next``, with
what the first carried back to the parent: the running jobs' rows and the PreFilter
calls kept for the waiting jobs), each with its ``fork`` and its reading back. CPU
seconds of the pass alone, in the process that ran it.

``--rounds R``: then R times in turn, the warm pass on the thread, that
``ForkedScheduler``'s next pass, and the next pass of one whose PreFilter calls do not
come back (the running jobs' rows alone, as before they did): each one's CPU seconds,
their median and least (``alternating``). One run of the script moves with the machine's
load; passes side by side in one process compare::

    python bench/forked_pass_costs.py [--nodes N] [--jobs P] [--rounds R]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pass_stages  # (bench/, the script's own folder)
from hal.core.job import Job
from hal.scheduler.forked import ForkedScheduler
from hal.scheduler.framework.availability import ReleaseLedger
from hal.scheduler.framework.runtime import Framework, OwnChanges, OwnMark
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.server.control_plane import server_scheduler
from hal.server.profile import server_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=0)
    ns = parser.parse_args()
    cluster = pass_stages._cluster(ns.nodes, ns.jobs, True, {})
    config = cluster.config

    def made() -> Scheduler:
        return server_scheduler(config, server_profile(config), pass_stages._user_predictor())

    scheduler = made()
    snap = pass_stages._snapshot(cluster)
    gc.freeze()
    report: dict[str, object] = {
        "nodes": ns.nodes,
        "jobs": ns.jobs,
        "running": len(snap.running),
        "cpu_model": _cpu_model(),
    }
    for label in ("thread-first", "thread"):
        began = time.process_time()
        scheduler.run_pass(snap)
        report[label] = round(time.process_time() - began, 3)

    def ledger_cold() -> None:
        scheduler.framework.releases = ReleaseLedger()

    def plugins_cold() -> None:
        fresh = made()
        scheduler.profile = scheduler.framework.profile = fresh.profile

    def all_cold() -> None:
        scheduler.__dict__.update(made().__dict__)

    cases: dict[str, Callable[[], None]] = {
        "warm": lambda: None,
        "ledger-cold": ledger_cold,
        "plugins-cold": plugins_cold,
        "all-cold": all_cold,
    }
    for label, prepare in cases.items():
        report[label] = _in_child(scheduler, snap, prepare)
    # the server's way: a ForkedScheduler of a scheduler made afresh, its first pass
    # cold, the next with what the first carried back
    forked = ForkedScheduler(made())
    for label in ("forked-first", "forked-next"):
        result = forked.run_pass(snap)
        forked.close()
        assert result.process is not None
        report[label] = round(result.process.cpu_s, 3)
        report[f"{label}-fork-s"] = round(result.process.fork_s, 3)
        report[f"{label}-load-s"] = round(result.process.load_s, 3)
    if ns.rounds:
        report["alternating"] = _alternating(made, snap, forked, ns.rounds)
    print(json.dumps(report))


class _RowsOnly(Framework):
    """A framework whose PreFilter calls a forked pass keeps do not come back: neither
    marked nor sent."""

    def own_mark(self) -> OwnMark:
        return 0, {}

    def own_changes(self, mark: OwnMark, pending: Sequence[Job]) -> OwnChanges | None:
        return None


def _alternating(
    made: Callable[[], Scheduler], snap: ClusterSnapshot, forked: ForkedScheduler, rounds: int
) -> dict[str, object]:
    thread = made()
    thread.run_pass(snap)
    plain = made()
    plain.framework = _RowsOnly(plain.profile, plain.framework.releases)
    rows_only = ForkedScheduler(plain)
    rows_only.run_pass(snap)  # (its first, cold)
    rows_only.close()
    seconds: dict[str, list[float]] = {"thread": [], "forked": [], "forked-rows-only": []}
    for _ in range(rounds):
        began = time.process_time()
        thread.run_pass(snap)
        seconds["thread"].append(round(time.process_time() - began, 3))
        for label, runner in (("forked", forked), ("forked-rows-only", rows_only)):
            result = runner.run_pass(snap)
            runner.close()
            assert result.process is not None
            seconds[label].append(round(result.process.cpu_s, 3))
    out: dict[str, object] = dict(seconds)
    for label, values in seconds.items():
        out[f"{label}-median"] = round(statistics.median(values), 3)
        out[f"{label}-least"] = min(values)
    return out


def _in_child(scheduler: Scheduler, snap: object, prepare: Callable[[], None]) -> float:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        gc.disable()
        prepare()
        began = time.process_time()
        scheduler.run_pass(snap)  # type: ignore[arg-type]
        os.write(write, repr(time.process_time() - began).encode())
        os._exit(0)
    os.close(write)
    spent = float(os.read(read, 100).decode())
    os.close(read)
    os.waitpid(pid, 0)
    return round(spent, 3)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
