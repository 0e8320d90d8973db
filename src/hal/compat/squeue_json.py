"""``squeue --json``: the shape of slurmrestd's data_parser v0.0.45 ``jobs`` response.

Each job is ``hal.wire.slurm_json.job_info``, the very ``job_info`` the slurmrestd
facade's ``GET /jobs/`` answers with; the ``meta`` names v0.0.45's Slurm release.
"""

from __future__ import annotations

from hal.wire.jobs import JobInfo
from hal.wire.slurm_json import V45, Json, job_info, meta, no_val

CLUSTER = "hal"  # squeue reads no cluster name from the server


def jobs_json(jobs: list[JobInfo], now: float) -> Json:
    return {
        "jobs": [job_info(job, CLUSTER) for job in jobs],
        "last_backfill": no_val(None),
        "last_update": no_val(now),
        "meta": meta(V45, CLUSTER),
        "errors": [],
        "warnings": [],
    }
