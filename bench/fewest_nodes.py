"""What jobs without -N cost the scheduler pass: ``hal bench sched-pass``'s
queue with its multi-task single-node jobs submitted without -N (``fewest_nodes``: any
count of nodes from one up to one per task, fewest first) against the same queue with
-N 1, one pass each way in the same process.

    python bench/fewest_nodes.py [JOBS NODES] [--json]
"""

from __future__ import annotations

import json
import sys
from typing import Any

import hal.bench.sched_pass as sched_pass
from hal.core.job import JobSpec

_plain = sched_pass._pending_spec


def _without_n(rng: Any, user: str, account: str) -> tuple[JobSpec, str, bool]:
    spec, partition, array = _plain(rng, user, account)
    if spec.nodes_min == spec.nodes_max == 1 and spec.ntasks > 1 and not spec.exclusive:
        spec = spec.with_changes(fewest_nodes=True, nodes_max=spec.ntasks)
    return spec, partition, array


def run(jobs: int, nodes: int) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "fewest-nodes", "jobs": jobs, "nodes": nodes}
    for name, spec in (("with_n1", _plain), ("without_n", _without_n)):
        sched_pass._pending_spec = spec  # type: ignore[assignment]
        try:
            result = sched_pass.run_sched_pass_bench(jobs, nodes, repeats=3)
        finally:
            sched_pass._pending_spec = _plain  # type: ignore[assignment]
        out[name] = {k: result[k] for k in ("median_ms", "jobs_started", "reservations")}
    return out


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv if a.isdigit()]
    jobs, nodes = (sizes + [10_000, 1_000][len(sizes) :])[:2]
    result = run(jobs, nodes)
    print(json.dumps(result, indent=None if "--json" in argv else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
