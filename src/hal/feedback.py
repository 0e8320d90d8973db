"""Report how a job is doing, from inside the job (docs/feedback.md)::

    import hal.feedback
    hal.feedback.report(samples_per_s=1830, loss=0.25)

It reads the job's ``HAL_FEEDBACK_TOKEN``, ``HAL_JOB_ID`` (or ``SLURM_JOB_ID``) and
``HAL_URL`` from the environment HAL gave the job, and posts the values to the server
over HTTP (``hal.client``): it needs no server code. The same as ``hal feedback
samples_per_s=1830`` in a script. Names are letters, digits and '_'; values finite
numbers; at most 16 metrics a job; about one report a second, with bursts of 20.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hal.core.errors import InvalidRequest
from hal.core.feedback import ENV_TOKEN

__all__ = ["report"]


def report(metrics: Mapping[str, float] | None = None, /, **more: float) -> None:
    """Report this job's metrics (``metrics`` and the keyword ones together). Raises a
    ``hal.core.errors.HalError`` the server's answer names (a 4xx: bad name or value, the
    rate limit; nothing kept) or ``InvalidRequest`` outside a HAL job."""
    from hal.client import HalClient

    values = {**(metrics or {}), **more}
    token = os.environ.get(ENV_TOKEN, "")
    job = os.environ.get("HAL_JOB_ID") or os.environ.get("SLURM_JOB_ID") or ""
    if not token or not job.isdigit():
        raise InvalidRequest(
            f"not inside a HAL job: {ENV_TOKEN} and HAL_JOB_ID are set in the environment "
            "of a running job only (report from the job's script or its programs)"
        )
    with HalClient(token=token) as client:
        client.report_feedback(int(job), values)
