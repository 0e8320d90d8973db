"""The run-time inflation rule (``hal.predict.anomaly.InflationRule``, the server's
``NodeRuntimeInflated``) on real users' prediction errors: how often it flags a healthy
node, and how soon it finds a slow one::

    python bench/node_inflation.py sdsc-sp2 kth-sp2 ctc-sp2 hpc2n cea-curie:30000 \
        [--windows-h 6,24] [--alphas 1e-5] [--json FILE]
    python bench/node_inflation.py --cost      # the rule's own time, and the loop's wait

Each job of the trace is predicted by ``learned`` (the server's settings) when it
started, knowing the jobs that had ended by then, as the server does; only predictions
of a model count, as in the server. The traces do not say which nodes ran a job, so each
job gets as many distinct nodes as its processors fill (nodes of one processor, as
``hal bench predict`` models all but CEA-Curie, whose nodes have 16), drawn at random
(seeded) from the machine's. The rule is checked every hour over the last
``--windows-h`` hours, as the detector checks every few seconds over the last 6.

With ``--nodes N`` every job runs on one node of N instead: the trace's users, their
jobs and their prediction errors, at the trace's pace, on a small pool whose nodes each
run many jobs (HTC-like), which is where a per-node rule has the runs to judge.

* **healthy**: the trace as it ran. Every flag is a false alarm: the report counts the
  node-hours flagged and the episodes (a node flagged at consecutive checks is one).
* **slow node**: from the middle of the trace on, every job that has node 0 among its
  nodes runs ``factor`` times longer (capped at its time limit, where it would have been
  killed): its ratio on all of its nodes grows, as a job waits for its slowest node.
  The report gives the hours until node 0 was first flagged.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import math
import random
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

from hal.bench.predict import load_case
from hal.core.states import JobState
from hal.predict.anomaly import InflationRule, Run
from hal.predict.registry import make_predictor
from hal.sim.history import trace_history

Job = tuple[float, float, float, float, int, float, str]


def ratios_of(case: str, first_jobs: int = 0) -> tuple[int, list[Job]]:
    """(nodes, [(start, end, run, predicted, nodes used, limit, user)]) of the trace's jobs
    that a model predicted at their start, in start order."""
    workload, cores = load_case(case, first_jobs)
    history = trace_history(workload)
    predictor = make_predictor("learned")
    ordered = sorted(history, key=lambda f: (f.end_time - f.runtime_s, f.job.id))
    ending: list[tuple[float, int, Any]] = []
    out = []
    for item in ordered:
        start = item.end_time - item.runtime_s
        while ending and ending[0][0] <= start:
            done = heapq.heappop(ending)[2]
            predictor.observe(done.job, done.runtime_s)
        predicted = predictor.predict(item.job)
        timed = item.job.state in (JobState.COMPLETED, JobState.TIMEOUT)  # as the server
        if getattr(predictor, "model_version", 0) > 0 and item.runtime_s > 0 and timed:
            used = -(-item.job.spec.ntasks * item.job.spec.cpus_per_task // cores)
            limit = float(item.job.time_limit_s)
            user = item.job.spec.user
            out.append((start, item.end_time, item.runtime_s, predicted, used, limit, user))
        heapq.heappush(ending, (item.end_time, item.job.id, item))
    return workload.machine_procs // cores, out


def scan(
    nodes: int,
    jobs: list[Job],
    rule: InflationRule,
    window_s: float,
    *,
    slow_from: float | None = None,
    factor: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    rng = random.Random(seed)
    ended: list[tuple[float, Run]] = []
    for start, _end, run, predicted, used, limit, user in jobs:
        placed = tuple(str(n) for n in rng.sample(range(nodes), min(used, nodes)))
        if slow_from is not None and start >= slow_from and "0" in placed:
            run = min(run * factor, limit)
        ended.append((start + run, Run(run / predicted, placed, user)))
    ended.sort(key=lambda e: e[0])
    first, last = ended[0][0], ended[-1][0]
    window: deque[tuple[float, Run]] = deque()
    i = 0
    flagged_hours = episodes = checks = 0
    found_at: float | None = None
    before: set[str] = set()
    t = first + window_s
    while t <= last:
        while i < len(ended) and ended[i][0] <= t:
            window.append(ended[i])
            i += 1
        while window and window[0][0] < t - window_s:
            window.popleft()
        now = {a.node for a in rule.anomalous(run for _, run in window)}
        checks += 1
        if slow_from is None or t < slow_from:
            flagged_hours += len(now)
            episodes += len(now - before)
        elif found_at is None and "0" in now:
            found_at = t
        before = now
        t += 3600.0
    out: dict[str, Any] = {"checks": checks}
    if slow_from is None:
        out |= {"false_node_hours": flagged_hours, "false_episodes": episodes,
                "node_hours": checks * nodes}  # fmt: skip
    else:
        out["hours_to_flag"] = None if found_at is None else round((found_at - slow_from) / 3600, 1)
    return out


def cost(nodes: int, runs: int) -> dict[str, Any]:
    """The detector's check (``InflationRule.judge``: the verdicts and every node's median)
    on ``runs`` one-node runs over ``nodes`` nodes (best of 3), and the event loop's
    longest wait for a 1 ms timer while it runs inline and, as the detector runs it, on
    a worker thread."""
    rng = random.Random(1)
    window = [
        Run(rng.lognormvariate(0, 1), (f"n{rng.randrange(nodes)}",), f"u{rng.randrange(200)}")
        for _ in range(runs)
    ]
    rule = InflationRule()
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        rule.judge(window)
        best = min(best, time.perf_counter() - t)

    async def stall(threaded: bool) -> float:
        worst, done = 0.0, False

        async def ticker() -> None:
            nonlocal worst
            while not done:
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                worst = max(worst, time.perf_counter() - t)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        if threaded:
            await asyncio.to_thread(rule.judge, window)
        else:
            rule.judge(window)
            await asyncio.sleep(0)
        done = True
        await task
        return worst

    return {
        "nodes": nodes,
        "runs": runs,
        "rule_ms": round(best * 1e3, 1),
        "loop_stall_inline_ms": round(asyncio.run(stall(False)) * 1e3, 1),
        "loop_stall_threaded_ms": round(asyncio.run(stall(True)) * 1e3, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="traces, CASE or CASE:FIRST_JOBS")
    parser.add_argument("--windows-h", default="6", help="windows to try, in hours")
    parser.add_argument("--alphas", default="1e-5", help="the rule's alphas to try")
    parser.add_argument("--min-users", default="2", help="the rule's min_users to try")
    parser.add_argument("--factors", default="1.5,2,3", help="slow nodes' factors")
    parser.add_argument(
        "--nodes", type=int, default=0, help="each job on one of NODES nodes (a small HTC pool)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--cost", action="store_true", help="time the rule itself (no trace needed)"
    )
    args = parser.parse_args()
    if args.cost:
        for nodes, runs in ((100, 5_000), (1_000, 50_000), (4_000, 200_000)):
            print(json.dumps(cost(nodes, runs)), flush=True)
        return
    results: dict[str, Any] = {}
    for arg in args.cases:
        case, _, first = arg.partition(":")
        nodes, jobs = ratios_of(case, int(first or 0))
        if args.nodes:
            nodes, jobs = args.nodes, [(*j[:4], 1, *j[5:]) for j in jobs]
        middle = jobs[len(jobs) // 2][0]
        row: dict[str, Any] = {
            "nodes": nodes,
            "jobs_with_model_predictions": len(jobs),
            "median_ratio": round(statistics.median(j[2] / j[3] for j in jobs), 3),
        }
        for hours in (float(x) for x in args.windows_h.split(",")):
            for alpha, users in itertools.product(
                (float(x) for x in args.alphas.split(",")),
                (int(x) for x in args.min_users.split(",")),
            ):
                rule, window_s = InflationRule(alpha=alpha, min_users=users), hours * 3600
                runs = {"healthy": scan(nodes, jobs, rule, window_s)}
                for f in (float(x) for x in args.factors.split(",")):
                    runs[f"slow_x{f:g}"] = scan(
                        nodes, jobs, rule, window_s, slow_from=middle, factor=f
                    )
                key = f"window_{hours:g}h_alpha_{alpha:g}_users_{users}"
                row[key] = runs
                print(json.dumps({arg: {key: runs}}), flush=True)
        results[arg] = row
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
