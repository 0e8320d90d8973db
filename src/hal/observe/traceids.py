"""Deterministic W3C trace context for a job, so ``TRACEPARENT`` never needs storing.

The trace id is a hash of the cluster name, the job id and its submit time (stored with
the job), so it is the same in every server process, after restarts, and distinct when a
fresh database reuses job ids. Each attempt (``job.restarts``) gets its own ``job.run``
span id; that span is the parent handed to the job as ``TRACEPARENT``, and the server
emits it with exactly that id when the attempt ends (``tracing.JobTracer``).

Pure (hashlib only): imported by ``hal.state.launch`` on the launch path.
"""

from __future__ import annotations

import hashlib

TRACE_FLAGS_SAMPLED = "01"


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()


def _nonzero(value: int) -> int:
    # W3C forbids all-zero ids; a zero hash prefix is astronomically unlikely, but be exact.
    return value or 1


def job_trace_id(cluster: str, job_id: int, submit_time: float) -> int:
    return _nonzero(int.from_bytes(_digest(cluster, job_id, repr(submit_time))[:16], "big"))


def job_span_id(cluster: str, job_id: int, submit_time: float, name: str, attempt: int = 0) -> int:
    """The span id of span ``name`` (``job``, ``job.queue``, ``job.run`` ...) of one attempt."""
    return _nonzero(
        int.from_bytes(_digest(cluster, job_id, repr(submit_time), name, attempt)[:8], "big")
    )


def traceparent(cluster: str, job_id: int, submit_time: float, attempt: int) -> str:
    """``TRACEPARENT`` for attempt ``attempt`` of the job: its ``job.run`` span."""
    trace = job_trace_id(cluster, job_id, submit_time)
    span = job_span_id(cluster, job_id, submit_time, "job.run", attempt)
    return f"00-{trace:032x}-{span:016x}-{TRACE_FLAGS_SAMPLED}"


def trace_id_hex(cluster: str, job_id: int, submit_time: float) -> str:
    return f"{job_trace_id(cluster, job_id, submit_time):032x}"
