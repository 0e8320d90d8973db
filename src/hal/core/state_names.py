"""Slurm's job state names and codes as plain strings: the table ``JobState`` is built on.

``squeue -t`` reads them at start-up, which a workflow tool pays once per job (issue 51):
``enum``, with the ``functools`` and ``collections`` it loads, costs a tenth of a bare
interpreter's start, more than the table. ``hal.core.states`` makes its enums of these.
"""

from __future__ import annotations

JOB_STATE_CODES = {
    "PENDING": "PD",
    "RUNNING": "R",
    "SUSPENDED": "S",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "CANCELLED": "CA",
    "FAILED": "F",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "PREEMPTED": "PR",
    "BOOT_FAIL": "BF",
    "DEADLINE": "DL",
    "OUT_OF_MEMORY": "OOM",
}
JOB_STATES_BY_CODE = {code: name for name, code in JOB_STATE_CODES.items()}
# the states a job does not leave (JobState.is_terminal)
TERMINAL_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# Slurm job state names and codes HAL never produces: accepted in squeue -t and sacct -s
# so scripts keep working (they match nothing).
OTHER_SLURM_STATES = frozenset(
    {
        "CONFIGURING", "CF", "REQUEUED", "RQ", "REQUEUE_HOLD", "RH", "REQUEUE_FED", "RF",
        "RESV_DEL_HOLD", "RD", "RESIZING", "RS", "REVOKED", "RV", "SIGNALING", "SI",
        "SPECIAL_EXIT", "SE", "STAGE_OUT", "SO", "STOPPED", "ST",
    }
)  # fmt: skip
