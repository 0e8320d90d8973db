"""What must hold after a chaos soak, read from the database alone (``hal bench soak``,
the failover integration test, or by hand after an incident)::

    python -m hal.bench.soak_invariants postgresql://hal@db/hal [--acked FILE]

``FILE``: the job ids the clients were told were accepted, one a line. Read straight
from the tables, not through a server: a server's view could hide what a takeover left
behind. The checks:

- ``lost``: acknowledged ids with no job row; ``duplicated``: jobs beyond the first
  with the same name (every soak job has a name of its own: a batch applied twice shows
  here) and ids acknowledged twice;
- ``ran_twice``: jobs that started more often (``job.started`` events) than their
  restarts allow, jobs whose earlier runs (``job_runs``) are not one per restart with
  the state that ended it (the requeue's reason), and jobs whose runs overlap in time;
- ``unaccounted``: finished jobs that ran but have no end time (``sacct`` lists only
  those with a start and an end), and restarts with no ``job_runs`` row (``sacct -D``);
- ``stranded``: jobs RUNNING or COMPLETING on a node that is gone (no row) or not UP
  whose job carries no reason and whose node carries none either.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "REQUEUED")
SHOWN = 20  # ids listed per failed check (the counts are complete)


def check(db_url: str, acknowledged: Iterable[int] = ()) -> dict[str, Any]:
    """Every check's count and a few of its ids; ``ok`` when all are zero."""
    import psycopg

    acked = list(acknowledged)
    with psycopg.connect(db_url) as conn:
        jobs = {
            int(r[0]): r[1:]
            for r in conn.execute(
                "SELECT id, name, state, reason, start_time, end_time, restarts, allocation "
                "FROM jobs"
            )
        }
        runs: dict[int, list[tuple[int, str, float | None, float]]] = {}
        for job_id, attempt, state, start, end in conn.execute(
            "SELECT job_id, attempt, state, start_time, end_time FROM job_runs"
        ):
            runs.setdefault(int(job_id), []).append((int(attempt), str(state), start, end))
        starts = Counter(
            int(r[0])
            for r in conn.execute(
                "SELECT job_id FROM events WHERE kind = 'job.started' AND job_id IS NOT NULL"
            )
        )
        nodes = {
            str(r[0]): (str(r[1]), str(r[2]))
            for r in conn.execute("SELECT name, state, reason FROM nodes")
        }
    lost = sorted(set(acked) - jobs.keys())
    names = Counter(row[0] for row in jobs.values())
    twice_acked = [i for i, n in Counter(acked).items() if n > 1]
    firsts: dict[str, int] = {}
    for job_id in sorted(jobs):
        firsts.setdefault(jobs[job_id][0], job_id)
    again = [i for i, row in jobs.items() if names[row[0]] > 1 and firsts[row[0]] != i]
    duplicated = sorted(again + twice_acked)
    ran_twice: list[int] = []
    unaccounted: list[int] = []
    stranded: list[int] = []
    for job_id, (_name, state, reason, start, end, restarts, allocation) in jobs.items():
        earlier = sorted(runs.get(job_id, []))
        if starts[job_id] > restarts + 1 or _overlap(earlier, start, end):
            ran_twice.append(job_id)
        elif [a for a, *_ in earlier] != list(range(restarts)) or any(
            not s for _, s, *_ in earlier
        ):
            (ran_twice if len(earlier) < restarts else unaccounted).append(job_id)
        if state not in ACTIVE and start is not None and end is None:
            unaccounted.append(job_id)
        if state in ("RUNNING", "COMPLETING") and reason in ("", "None"):
            on = json.loads(allocation)["nodes"] if allocation else []
            if any(_gone(nodes.get(n)) for n in on):
                stranded.append(job_id)
    found = {
        "jobs": len(jobs),
        "acknowledged": len(acked),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "ran_twice": len(ran_twice),
        "unaccounted": len(unaccounted),
        "stranded": len(stranded),
        "requeued_runs": sum(len(r) for r in runs.values()),
        "examples": {
            k: v[:SHOWN]
            for k, v in (
                ("lost", lost),
                ("duplicated", duplicated),
                ("ran_twice", sorted(ran_twice)),
                ("unaccounted", sorted(unaccounted)),
                ("stranded", sorted(stranded)),
            )
            if v
        },
    }
    found["ok"] = not (lost or duplicated or ran_twice or unaccounted or stranded)
    return found


def _gone(node: tuple[str, str] | None) -> bool:
    """A node with no row, or DOWN with no reason given (one with a reason was taken
    out on purpose, or by the server saying why)."""
    return node is None or (node[0] == "DOWN" and not node[1])


def _overlap(
    earlier: list[tuple[int, str, float | None, float]], start: float | None, end: float | None
) -> bool:
    """Whether any two runs of one job overlap in time (the current run: ``start`` to
    ``end``, or still going)."""
    spans = [(s, e) for _, _, s, e in earlier if s is not None]
    if start is not None:
        spans.append((start, end if end is not None else float("inf")))
    spans.sort()
    return any(b[0] < a[1] for a, b in itertools.pairwise(spans))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hal.bench.soak_invariants", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("db", help="the database's URL (postgresql://...)")
    parser.add_argument("--acked", help="a file of acknowledged job ids, one a line")
    ns = parser.parse_args(argv)
    acked: list[int] = []
    if ns.acked:
        with open(ns.acked) as f:
            acked = [int(line) for line in f if line.strip()]
    found = check(ns.db, acked)
    print(json.dumps(found, indent=2))
    return 0 if found["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
