"""What a ``squeue`` with a field set the server has not answered since its start costs
the server's event loop, in CPU seconds: the job list behind ``GET /v1/jobs?fields=``
(``hal.api.job_list``, each field set's JSON kept) of P pending jobs and R running ones
on a real ``Cluster`` over the memory store, no server. squeue's default set is asked
first (kept, as after the first ``squeue``), then each set of ``FORMATS`` (``squeue -o``
formats, ``-l``) for the first time and once more (the clock moved 5 s), with
``omit_defaults`` as squeue asks; each answer's SHA-256, the same in every tree for the
same jobs. Prints one JSON object::

    python bench/job_list_fields.py [P [R]]                      # 100000 1000
    PYTHONPATH=/path/to/other/tree/src python bench/job_list_fields.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time

from hal.api.job_list import JobListCache
from hal.client import records as read
from hal.compat import squeue
from hal.testing import make_job
from queue_paths import queue

NODES = 100
FORMATS = (
    ["-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R %Q %V"],
    ["-l"],
    ["-o", "%i %j %a %C %m %l %L %S %e %Z %k"],
)


def _fields(argv: list[str]) -> tuple[frozenset[str], bool]:
    """The field set ``squeue argv`` asks for and whether it leaves out defaults."""
    query = squeue.parse_query(argv)
    assert query is not None
    asked = squeue.query_fields(query) or []
    return frozenset(asked), read.job_defaults(asked) is not None


def main(pending: int, running: int) -> dict[str, object]:
    cluster, clock = queue(
        NODES, running, pending, lambda i: make_job(i).user(f"u{i % 20}").name(f"job{i % 8}")
    )
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    loop = asyncio.new_event_loop()
    cache = JobListCache()

    def listed(fields: frozenset[str], omit: bool) -> tuple[float, str]:
        t = time.process_time()
        body = loop.run_until_complete(cache.body(jobs, cluster, fields, omit))
        return round(time.process_time() - t, 3), hashlib.sha256(body).hexdigest()[:16]

    out: dict[str, object] = {"pending": pending, "running": running}
    out["default_first_s"], out["default_sha"] = listed(*_fields([]))
    for argv in FORMATS:
        fields = _fields(argv)
        first, sha = listed(*fields)
        clock.advance(5)
        again, _ = listed(*fields)
        out[" ".join(argv)] = {
            "first_s": first,
            "again_s": again,
            "sha": sha,
            "fields": len(fields[0]),
        }
    return out


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] + [100_000, 1000][len(sys.argv) - 1 :]
    print(json.dumps(main(*sizes[:2]), indent=1))
