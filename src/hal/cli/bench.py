"""``hal bench ...``: run one benchmark and print its JSON (or a short summary)."""

from __future__ import annotations

import argparse
from typing import Any

from hal.bench import emit


def add_commands(sub: Any, *, with_modules: bool = True) -> None:
    """``hal bench``; ``with_modules=False`` leaves out the subcommands that live in
    heavy modules (another command is running: they are never parsed)."""
    bench = sub.add_parser("bench", help="benchmarks (JSON results)")
    bsub = bench.add_subparsers(metavar="BENCHMARK")

    p = bsub.add_parser(
        "submit", help="batch REST submission rate; sbatch and squeue beside python -c pass"
    )
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--sbatch-runs", type=int, default=20, help="counted rounds of each command")
    p.add_argument(
        "--python",
        help="the interpreter sbatch, squeue and python -c pass run with: another install "
        "of HAL, run without PYTHONPATH (default: this one)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_submit)

    p = bsub.add_parser("idle", help="CPU used by an idle control plane")
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_idle)

    p = bsub.add_parser(
        "e2e-vs-slurm", help="1,000 jobs and a 1,000-task array, HAL vs Slurm 22.05"
    )
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--array", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-slurm", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_e2e)

    p = bsub.add_parser("topology", help="place one multi-node job on a 10,000-node tree")
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--leaf", type=int, default=16, help="nodes per leaf switch")
    p.add_argument("--levels", type=int, default=3)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument(
        "--labels",
        action="store_true",
        help="a rack/zone/region/site label tree with NVLink domains instead of switches",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_topology)

    from hal.cli import cache

    cache.add_bench_command(bsub)
    if not with_modules:
        return

    from hal.bench import (
        agent_traffic,
        artifacts,
        cloud,
        failover,
        fragmentation,
        harmonic,
        harmonic_dissonance,
        predict,
        replay_cost,
        scale,
        sched_pass,
        sim,
        soak,
        takeover,
    )
    from hal.bench import data as data_bench
    from hal.bench import envs as envs_bench
    from hal.bench import htc as htc_bench

    agent_traffic.add_commands(bsub)
    artifacts.add_commands(bsub)
    cloud.add_commands(bsub)
    data_bench.add_commands(bsub)
    envs_bench.add_commands(bsub)
    sim.add_commands(bsub)
    predict.add_commands(bsub)
    replay_cost.add_commands(bsub)
    sched_pass.add_commands(bsub)
    scale.add_commands(bsub)
    takeover.add_commands(bsub)
    failover.add_commands(bsub)
    soak.add_commands(bsub)
    fragmentation.add_commands(bsub)
    harmonic.add_commands(bsub)
    harmonic_dissonance.add_commands(bsub)
    htc_bench.add_bench_command(bsub)


def cmd_submit(ns: argparse.Namespace) -> int:
    from hal.bench.submit import run_submit_bench

    return emit(run_submit_bench(ns.jobs, ns.batch, ns.sbatch_runs, ns.python), ns.json)


def cmd_idle(ns: argparse.Namespace) -> int:
    from hal.bench.idle import run_idle_bench

    return emit(run_idle_bench(ns.window), ns.json)


def cmd_e2e(ns: argparse.Namespace) -> int:
    from hal.bench.e2e import run_e2e_bench

    return emit(run_e2e_bench(ns.jobs, ns.array, ns.repeats, with_slurm=not ns.skip_slurm), ns.json)


def cmd_topology(ns: argparse.Namespace) -> int:
    from hal.bench.topology import run_topology_bench

    if ns.labels:
        from hal.bench.topology_labels import run_label_bench

        return emit(run_label_bench(ns.nodes, ns.repeats), ns.json)

    return emit(run_topology_bench(ns.nodes, ns.leaf, ns.levels, ns.repeats), ns.json)
