"""Replay a stretch of a trace's jobs through the simulator, from an empty machine, and
print the CPU time, the passes and a digest of every start and end.

A whole CEA-Curie replay takes 5 to 20 minutes, by machine; a stretch where the queue is
long (jobs 141,000 to 156,000 hold hundreds waiting) shows in seconds what a change
does there, and the digest tells whether the schedule moved::

    python bench/sim_segment.py 141000 147000
    python bench/sim_segment.py 141000 147000 --policy easy-sjbf --predictor avg2
    PYTHONPATH=/path/to/other/tree/src python bench/sim_segment.py 141000 147000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import replace

from hal.core.errors import InvalidRequest
from hal.sim.cluster import ClusterModel
from hal.sim.engine import Simulation
from hal.sim.policies import scheduler_for
from hal.sim.run import make_predictor
from hal.sim.traces import trace_file
from hal.sim.workload import Cleaning, load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=int, help="index of the first job replayed")
    parser.add_argument("end", type=int, help="index after the last job replayed")
    parser.add_argument(
        "--trace", help="an SWF file (default: CEA-Curie-2011-2.1-cln.swf.gz in HAL_TRACES)"
    )
    parser.add_argument("--procs", type=int, default=80_640)
    parser.add_argument("--cores-per-node", type=int, default=16)
    parser.add_argument("--policy", default="easy")
    parser.add_argument("--predictor", default="user")
    args = parser.parse_args()
    try:
        trace = args.trace or trace_file("CEA-Curie-2011-2.1-cln.swf.gz")
    except InvalidRequest as err:
        parser.error(err.message)
    workload = load_workload(trace, Cleaning(procs=args.procs, first_jobs=args.end))
    workload = replace(workload, jobs=workload.jobs[args.first : args.end])
    predictor = make_predictor(args.predictor, workload)
    simulation = Simulation(
        workload.jobs,
        ClusterModel.for_procs(args.procs, args.cores_per_node),
        scheduler_for(args.policy, predictor),
        predictor=predictor,
    )
    began = time.process_time()
    run = simulation.run()
    cpu = time.process_time() - began
    schedule = repr([(o.job.id, o.start, o.end) for o in run.outcomes]).encode()
    print(
        json.dumps(
            {
                "jobs": len(workload.jobs),
                "cpu_s": round(cpu, 2),
                "passes": run.passes,
                "skipped_passes": run.skipped_passes,
                "schedule_digest": hashlib.sha1(schedule).hexdigest()[:12],
            }
        )
    )


if __name__ == "__main__":
    main()
