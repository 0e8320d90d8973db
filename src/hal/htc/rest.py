"""REST schemas for HTC sessions (``/v1/htc``), shared by the api router, the SDK and the
broker's calls to the control plane. Validated at the edge only; inside, plain values."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from hal.core.errors import InvalidRequest
from hal.wire.bounds import INT64_MAX

SESSION_ID = r"^s[0-9a-f]{12}$"
# The worker's task timer (setitimer) takes at most ~292 years; a lease becomes the worker
# job's time limit. 100 years is "no limit" for both.
MAX_SECONDS = 100 * 365 * 86400
MAX_ENV_BYTES = 1024 * 1024  # as a batch job's (api/convert.py)


class ServiceSpec(BaseModel):
    """What the workers run: ``python`` (``target="module:function"``) or ``exec`` (argv)."""

    model_config = ConfigDict(extra="forbid")
    kind: str = Field(default="python", pattern="^(python|exec)$")
    target: str = Field(default="", max_length=1024)
    argv: list[str] = Field(default_factory=list, max_length=256)

    def label(self) -> str:
        return self.target if self.kind == "python" else " ".join(self.argv)


class SessionOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    service: ServiceSpec
    name: str = Field(default="", max_length=256)
    priority: int = Field(default=1, ge=1, le=1000)
    min_workers: int = Field(default=0, ge=0, le=100_000)
    max_workers: int = Field(default=64, ge=1, le=100_000)
    retries: int = Field(default=0, ge=0, le=100)  # re-runs of a task that raised/timed out
    max_worker_deaths: int = Field(default=3, ge=1, le=100)  # then a task is poison
    task_timeout_seconds: float | None = Field(default=None, gt=0)
    cpus_per_worker: int = Field(default=1, ge=1, le=1024)
    memory_per_worker_bytes: int | None = Field(default=None, ge=1)
    partition: str | None = Field(default=None, max_length=256)
    python: str = Field(default="python3", max_length=4096)
    workdir: str = Field(default="/tmp", max_length=4096)
    environment: dict[str, str] = Field(default_factory=dict)
    worker_output: str = Field(default="/dev/null", max_length=4096)
    worker_lease_seconds: float = Field(default=600.0, gt=0)
    has_common_data: bool = False  # workers wait for the client's common data
    journal: bool = False  # recoverable: tasks and outcomes kept in a file (journal.py)


def check_options(o: SessionOptions) -> None:
    """What ``SessionOptions``' types let through but a worker could never run, refused
    when the session opens (``InvalidRequest`` naming the field) rather than after its
    workers failed to start 3 times. Not part of the model, so journals written by an
    earlier broker still load."""

    def bad(field: str, message: str) -> InvalidRequest:
        return InvalidRequest(f"{field}: {message}", field=field)

    s = o.service
    if s.kind == "python" and not re.fullmatch(r"[^:\s]+:[^:\s]+", s.target):
        raise bad("service.target", f"{s.target!r} must look like 'package.module:function'")
    if s.kind == "exec" and (not s.argv or not s.argv[0]):
        raise bad("service.argv", "name the program to run: a non-empty argv")
    texts = {
        "name": o.name,
        "service.target": s.target,
        **{f"service.argv[{i}]": a for i, a in enumerate(s.argv)},
        "partition": o.partition or "",
        "python": o.python,
        "workdir": o.workdir,
        "worker_output": o.worker_output,
        **{f"environment.{k!r}": k + v for k, v in o.environment.items()},
    }
    for field, text in texts.items():
        if "\x00" in text:
            raise bad(field, "holds a NUL character (\\u0000), which no field may hold; remove it")
    if o.min_workers > o.max_workers:
        raise bad(
            "min_workers",
            f"{o.min_workers} is above max_workers ({o.max_workers}); raise max_workers or "
            "lower min_workers",
        )
    if not o.python.strip():
        raise bad("python", "name a Python interpreter for the workers, e.g. python3")
    odd = next((k for k in o.environment if not k or "=" in k), None)
    if odd is not None:
        raise bad("environment", f"a variable name cannot be empty or hold '=': {odd!r}")
    if sum(len(k) + len(v) for k, v in o.environment.items()) > MAX_ENV_BYTES:
        raise bad("environment", "larger than 1 MiB; pass big values in common data")
    if not o.workdir.startswith("/"):
        raise bad("workdir", f"must be an absolute path, not {o.workdir!r}")
    for field, seconds in (
        ("task_timeout_seconds", o.task_timeout_seconds),
        ("worker_lease_seconds", o.worker_lease_seconds),
    ):
        if seconds is not None and not seconds <= MAX_SECONDS:
            raise bad(field, f"at most {MAX_SECONDS} s (100 years); leave it out for no limit")
    if o.memory_per_worker_bytes is not None and o.memory_per_worker_bytes > INT64_MAX:
        raise bad("memory_per_worker_bytes", f"at most {INT64_MAX} bytes")


class SessionTicket(BaseModel):
    """What a client needs to talk to the broker for one session."""

    session: str
    broker: str  # HOST:PORT
    key: str  # the session's client secret


class WorkerInfo(BaseModel):
    job_id: int
    host: str = ""
    pid: int = 0
    state: str  # pending, loading, ready, draining, lost, restarting, exiting
    in_flight: int = 0


class SessionInfo(BaseModel):
    id: str
    name: str = ""
    user: str
    service: str
    state: str  # OPEN, CLOSED, DONE, CANCELLED, FAILED, LOST
    reason: str = ""
    priority: int
    min_workers: int
    max_workers: int
    created: float
    ended: float | None = None
    submitted: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    worker_deaths: int = 0
    backlog: int = 0
    in_flight: int = 0
    rate_per_second: float = 0.0
    client_attached: bool = False
    target_workers: int = 0
    journal: bool = False
    workers: list[WorkerInfo] = Field(default_factory=list)


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class WorkerLaunch(BaseModel):
    session: str
    user: str
    script: str
    name: str
    cpus: int = 1
    memory_bytes: int | None = None
    partition: str | None = None
    workdir: str = "/tmp"
    environment: dict[str, str] = Field(default_factory=dict)
    output: str = "/dev/null"
    time_limit_seconds: int | None = None


class HtcStats(BaseModel):
    """The broker's aggregate numbers for the control plane's ``/metrics`` (no session ids).

    Counters count from the broker process's start (a restarted broker starts again at 0,
    which Prometheus reads as a counter reset); gauges are the state at the report.
    """

    sessions: dict[str, int] = Field(default_factory=dict)  # live, by state (open/closed)
    sessions_opened: int = 0
    sessions_ended: dict[str, int] = Field(default_factory=dict)  # done/cancelled/failed/lost
    tasks_submitted: int = 0
    tasks_completed: dict[str, int] = Field(default_factory=dict)  # ok/failed/timeout/poison
    tasks_retried: int = 0
    backlog: int = 0  # tasks waiting for a worker
    in_flight: int = 0  # tasks sent to a worker, result not back yet
    workers: dict[str, int] = Field(default_factory=dict)  # by state (WorkerInfo.state)
    worker_failures: dict[str, int] = Field(default_factory=dict)  # lost/start


class WorkerSync(BaseModel):
    """Broker -> control plane: start these worker jobs, cancel those, report on these.
    ``stats`` rides along (every pool round, ~4/s) so a scrape never waits on the broker."""

    launch: list[WorkerLaunch] = Field(default_factory=list)
    cancel: list[int] = Field(default_factory=list)
    watch: list[int] = Field(default_factory=list)
    stats: HtcStats | None = None


class WorkerSyncReply(BaseModel):
    launched: list[int] = Field(default_factory=list)  # job ids, 0 where refused
    errors: list[str] = Field(default_factory=list)  # why, where refused
    states: dict[int, str] = Field(default_factory=dict)  # watched job -> state (GONE)
    capacity_cpus: int = 0  # CPUs of nodes that are up
