"""Check a replay's per-job output (``hal sim run ... --swf-out FILE``) against EASY's
promises (``hal.sim.audit``): no head started after its first shadow time, no waiting job
left that count-based EASY would have backfilled::

    hal sim run TRACE --policy easy --swf-out easy.swf
    python bench/easy_audit.py easy.swf --procs 240 --plan request
    hal sim run TRACE --policy easy-sjbf --predictor perfect --swf-out exact.swf
    python bench/easy_audit.py exact.swf --procs 240 --plan run

Only for one-core nodes and plans fixed at start (``user``: the request; ``perfect``:
the run time); with ``avg2`` or ``learned`` the plans are not in the file.
"""

from __future__ import annotations

import argparse
import json

from hal.sim.audit import Ran, audit_easy
from hal.sim.swf import read_swf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("swf", help="a replay's --swf-out file")
    parser.add_argument("--procs", type=int, required=True, help="the machine's processors")
    parser.add_argument("--plan", choices=("request", "run"), required=True)
    args = parser.parse_args()
    _, records = read_swf(args.swf)
    jobs = [
        Ran(
            r.job,
            r.submit,
            r.submit + r.wait,
            r.submit + r.wait + r.run,
            r.procs_alloc,
            r.time_req if args.plan == "request" else r.run,
        )
        for r in records
        if r.wait >= 0 and r.run > 0
    ]
    audit = audit_easy(jobs, args.procs)
    print(
        json.dumps(
            {
                "jobs": len(jobs),
                "heads": audit.heads,
                "instants_with_jobs_waiting": audit.instants,
                "late_heads": len(audit.late_heads),
                "missed_backfills": len(audit.missed),
                "first_late_heads": audit.late_heads[:5],
                "first_missed": audit.missed[:5],
            }
        )
    )


if __name__ == "__main__":
    main()
