"""What one scheduling cycle of the server costs, stage by stage, at ``hal bench scale``'s
size without its server: a real ``Cluster`` over the memory store holding N nodes of 16
CPUs (partition ``bulk``) and P pending jobs of the scale bench's mix (``MIX``: half of
them 1-CPU, then 1/8, 1/4, 1/2 and whole nodes; 600 s limits), scheduled by the server's
own profile for that config and its ``PacedScheduler``. Stages, each timed on its own
(CPU seconds of one process, so that a loaded machine's figures compare; no event loop
competing):

* ``snapshot``: ``cluster.snapshot()`` and ``fill_related`` (the loop's, before a pass);
* ``main`` and ``backfill``: the pass (``PacedScheduler.run_pass``; backfill's part from
  ``PassResult.backfill``), the context, changes and plan counted in ``main``;
* ``forecast``: the expected starts of the plan's ``forecasting`` jobs (after applying);
* ``apply``: ``cluster.apply_plan`` of the plan (starts, capped by ``max_job_starts``, and
  reason updates), then of the forecast's updates.

Two scenes, as the live bench meets them: ``open`` (every node idle, the whole queue
pending: the passes right after the partition opens, each placing more jobs than
``max_job_starts`` lets start) and ``full`` (the nodes full of running jobs, the queue
behind them: a pass after a few jobs ended). Each scene runs a cycle at each of ``AT`` on
the virtual clock: a full pass (backfill due), passes triggered by events one second
apart, and the next backfill pass. The cycles are run once with ``[scheduler]`` as the config gives
it and once with ``--set KEY=VALUE`` settings over it (e.g. ``default_queue_depth=0``:
every pass full, as before the queue depth came)::

    python bench/pass_stages.py [--nodes N] [--jobs P] [--set k=v ...] [--base k=v ...]

``--stages`` also times the pass's own stages (``stages`` in each cycle: the node table,
the sort, the main loop, the backfill stage, the reasons), each wrapped, so that a
profile's question "which of them" has an answer in CPU seconds.

Prints one JSON object: per scene and per settings, each cycle's stages, its pass
(``main`` and ``backfill``: ``/v1/diag``'s ``max_pass_s`` counts these) and its cycle (the
pass and the forecast slice: ``max_cycle_s``), and the longest of each.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from hal.config.model import HalConfig, config_from_dict
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.scheduler.forked import ForkedScheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.service import PacedScheduler, PassScheduler
from hal.server import control_plane
from hal.server.control_plane import server_scheduler
from hal.server.profile import server_profile
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.testing import JobBuilder, make_job
from hal.testing.builders import make_node
from hal.testing.mirror import store

T = TypeVar("T")
_LOOP = asyncio.new_event_loop()
CPUS = 16
NOW = 1_000_000.0
# when each cycle runs, seconds after the first: a full pass (backfill due), passes
# woken by events a second apart, then the next backfill pass (bf_interval, 30 s)
AT = (0.0, 1.0, 2.0, 3.0, 31.0)
# the bounds as the server sets them; a tree without them (run with its PYTHONPATH)
# passes every job each time
_PASS_BOUNDS: Callable[[HalConfig], Any] | None = getattr(control_plane, "pass_bounds", None)
# (share, CPUs as a fraction of a node: 0 = one CPU): hal.bench.scale.MIX
MIX = ((0.50, 0.0), (0.20, 0.125), (0.15, 0.25), (0.10, 0.5), (0.05, 1.0))


def _config(nodes: int, settings: Mapping[str, object]) -> HalConfig:
    raw: dict[str, Any] = {
        "cluster_name": "bench",
        "partitions": [{"name": "bulk", "default": True, "nodes": f"emu[1-{nodes}]"}],
        "scheduler": {"predictor": "user", **settings},
    }
    return config_from_dict(raw, "bench")


def _widths(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    widths = [max(1, round(f * CPUS)) for _, f in MIX]
    return rng.choices(widths, [s for s, _ in MIX], k=count)


def _cluster(nodes: int, jobs: int, full: bool, settings: Mapping[str, object]) -> Cluster:
    clock = VirtualClock(NOW)
    cluster = Cluster(MemoryStateStore(), _config(nodes, settings), clock)
    _run(cluster.load())
    for n in range(1, nodes + 1):
        name = f"emu{n}"
        cluster.nodes[name] = make_node(name).cpus(CPUS).mem_gib(64).build()
        cluster.agent_sessions[name] = AgentSession(name)
    made: list[Job] = []

    def bulk(width: int) -> JobBuilder:
        """The mix's job of ``width`` CPUs in the bulk partition, numbered in turn."""
        return make_job(len(made) + 1).partition("bulk").cpus(width).mem_gib(width).limit(600)

    if full:  # every node's CPUs held by jobs of the mix, started over the last 10 min
        rng = random.Random(3)
        for n in range(1, nodes + 1):
            free = CPUS
            for width in _widths(CPUS, n):
                if width > free:
                    continue
                free -= width
                start = NOW - rng.uniform(0, 500)
                running = bulk(width).running_on(f"emu{n}", start=start).build()
                made.append(running.evolve(launched=True))
    for k, width in enumerate(_widths(jobs, 7)):
        made.append(bulk(width).submitted(NOW - 300 + k * 0.001).build())
    store(cluster, *made)
    return cluster


def _timed(fn: Callable[..., T], *args: Any) -> tuple[T, float, float]:
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - t, time.process_time() - c


# ``--stages``: CPU seconds of the pass's own stages in the cycle being run, by label
_STAGES: dict[str, float] = {}


def _time_stages() -> None:
    """``--stages``: the pass's stages wrapped so that each adds its CPU seconds to
    ``_STAGES``: the node table with the running jobs taken out (``table``), the queue's
    sort, the main loop, the backfill stage and the reasons worked out (``changes``)."""
    from hal.scheduler.framework import context, main_loop, runtime, scheduler

    stages: tuple[tuple[Any, str, str], ...] = (
        (context.PassContext, "from_snapshot", "table"),
        (runtime.Framework, "sort", "sort"),
        (main_loop.MainLoop, "run", "loop"),
        (scheduler.Scheduler, "_backfill", "backfill"),
        (scheduler, "_changes", "changes"),
    )
    for owner, name, label in stages:
        static = isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, _timing(getattr(owner, name), label, static=static))


def _timing(fn: Callable[..., T], label: str, *, static: bool) -> Any:
    def timed(*args: Any, **kwargs: Any) -> T:
        began = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _STAGES[label] = _STAGES.get(label, 0.0) + time.process_time() - began

    return staticmethod(timed) if static else timed


def _cycles(cluster: Cluster, fork: bool = False) -> list[dict[str, Any]]:
    config = cluster.config
    scheduler = server_scheduler(config, server_profile(config), _user_predictor())
    runner: PassScheduler = ForkedScheduler(scheduler) if fork else scheduler
    if _PASS_BOUNDS is None:
        paced = PacedScheduler(runner)
    else:
        paced = PacedScheduler(runner, bounds=_PASS_BOUNDS(config))
    clock = cluster.clock
    assert isinstance(clock, VirtualClock)
    out: list[dict[str, Any]] = []
    for at in AT:
        clock.advance(NOW + at - clock.now())
        row: dict[str, Any] = {"at_s": at}
        snap, wall, cpu = _timed(_snapshot, cluster)
        row["snapshot_s"] = round(cpu, 3)
        row["pending"] = len(snap.pending)
        _STAGES.clear()
        result, wall, cpu = _timed(paced.run_pass, snap)
        if result.process is not None:  # (``--fork``: the child's CPU is the pass's)
            row["parent_cpu_s"] = round(cpu, 3)
            row["fork_s"] = round(result.process.fork_s, 3)
            row["load_s"] = round(result.process.load_s, 3)
            cpu = result.process.cpu_s
        if _STAGES:
            row["stages"] = {k: round(v, 3) for k, v in _STAGES.items()}
        backfill = result.backfill.duration_s if result.backfill is not None else 0.0
        # (backfill's share of the pass's CPU: its share of the wall time)
        share = backfill / wall if wall > 0 else 0.0
        row["main_s"] = round(cpu * (1 - share), 3)
        row["backfill_s"] = round(cpu * share, 3)
        row["pass_wall_s"] = round(wall, 3)
        row["looked_at"] = result.looked
        plan = result.plan
        row["placed"] = len(plan.placements)
        row["updates"] = len(plan.updates)
        applied, _, cpu = _timed(_apply, cluster, plan)
        row["started"] = len(applied)
        row["apply_s"] = round(cpu, 3)
        updates, wall, cpu = _timed(paced.forecast, plan)
        row["forecast_s"] = round(cpu, 3)
        row["forecast_wall_s"] = round(wall, 3)
        row["forecast_updates"] = len(updates)
        if updates:
            _, _, cpu = _timed(_apply, cluster, Plan(plan.revision, updates=updates))
            row["apply_s"] = round(row["apply_s"] + cpu, 3)
        # /v1/diag's pass (max_pass_s) and cycle, the pass and the forecast slice
        row["pass_s"] = round(row["main_s"] + row["backfill_s"], 3)
        row["cycle_s"] = round(row["pass_s"] + row["forecast_s"], 3)
        out.append(row)
    return out


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` run on the bench's one event loop. Not ``asyncio.run``: on Python 3.11 it
    puts its SIGINT handler back at the end, and ``signal.getsignal`` formats the
    handler's repr, which holds the task and so the repr of its result: a snapshot of
    100,000 jobs written out whole, seconds of CPU counted as the snapshot's."""
    return _LOOP.run_until_complete(coro)


def _snapshot(cluster: Cluster) -> ClusterSnapshot:
    return _run(cluster.fill_related(cluster.snapshot()))


def _apply(cluster: Cluster, plan: Plan) -> list[int]:
    return _run(cluster.apply_plan(plan))


def _user_predictor() -> Any:
    from hal.predict import planning_predictor

    return planning_predictor("user", "default")


def _settings(pairs: list[str]) -> dict[str, object]:
    found: dict[str, object] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        found[key] = json.loads(value)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--base", action="append", default=[], help="[scheduler] k=v, both")
    parser.add_argument("--set", action="append", default=[], help="[scheduler] k=v, second")
    parser.add_argument("--scene", choices=("open", "full", "both"), default="both")
    parser.add_argument("--stages", action="store_true", help="time the pass's own stages")
    parser.add_argument(
        "--fork", action="store_true", help="each pass decided in a forked process (ADR 0031)"
    )
    ns = parser.parse_args()
    base = _settings(ns.base)
    variants = {"config": base}
    if ns.set:
        variants["set"] = {**base, **_settings(ns.set)}
    report: dict[str, Any] = {
        "nodes": ns.nodes,
        "jobs": ns.jobs,
        "settings": variants,
        "fork": ns.fork,
    }
    scenes = ("open", "full") if ns.scene == "both" else (ns.scene,)
    if ns.stages:
        _time_stages()
    gc.freeze()
    for scene in scenes:
        for name, settings in variants.items():
            built, wall, _ = _timed(_cluster, ns.nodes, ns.jobs, scene == "full", settings)
            running = sum(1 for j in built.jobs.values() if j.state.is_active)
            cycles = _cycles(built, ns.fork)
            report[f"{scene}/{name}"] = {
                "build_s": round(wall, 1),
                "running": running,
                "cycles": cycles,
                "longest_pass_s": max(c["pass_s"] for c in cycles),
                "longest_cycle_s": max(c["cycle_s"] for c in cycles),
            }
            print(json.dumps({scene + "/" + name: report[f"{scene}/{name}"]}), flush=True)
            del built
            gc.collect()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
