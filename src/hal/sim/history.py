"""A trace as a finished-job history (``hal.predict.evaluate.Finished``): each job as it
was submitted, with its final state, its run time and when it really ended (the trace's
own schedule: submit + wait + run)."""

from __future__ import annotations

from hal.core.job import Job
from hal.predict.evaluate import Finished
from hal.sim.cluster import PARTITION, ClusterModel
from hal.sim.engine import final_state, with_trace_fields
from hal.sim.workload import Workload


def trace_history(workload: Workload) -> list[Finished]:
    cluster = ClusterModel.for_procs(workload.machine_procs)
    out = []
    for tj in workload.jobs:
        spec = with_trace_fields(cluster.spec_for(tj.procs, tj.user), tj)
        job = Job(
            id=tj.id,
            spec=spec,
            partition=PARTITION,
            state=final_state(tj),
            submit_time=tj.submit,
            time_limit_s=int(-(-tj.requested // 1)),
        )
        out.append(Finished(job, tj.run, tj.submit + max(tj.record.wait, 0.0) + tj.run))
    return out
