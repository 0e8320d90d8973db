"""HTTP surface of the observability plane (``hal.observe``), mounted by ``install``:

* ``GET /metrics``                   Prometheus text exposition (no token, as scrapers
                                     expect; it carries no job ids or user names)
* ``GET /v1/alerts``                 built-in alerts: firing and recently resolved
* ``GET /v1/diag``                   scheduler statistics since the server started (sdiag)
* ``GET /v1/observe/overview``       the dashboard's cluster page in one request
* ``GET /v1/observe/queue``          one page of the queue, filtered and sorted here so
                                     the browser never holds 10,000 rows
* ``GET /v1/observe/jobs/{id}``      job detail: timeline, resources, profile, trace id
* ``GET /v1/observe/traffic``        the traffic graph as nodes and edges to draw,
                                     filtered by user and partition here
* ``GET /v1/jobs/{id}/output``       the job's stdout/stderr (``follow`` streams it):
                                     from the shared filesystem, else through the job's
                                     agent (``outputrelay``, ADR 0007)
* ``POST /v1/agent/{node}/output``   the agents' side of that relay (agent token)
* ``GET /ui`` and ``/ui/static/*``   the dashboard (hand-written HTML/CSS/JS)

Authentication is the API's own (``hal.api.deps``): the dashboard sends the bearer
token it was given.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hal import __version__
from hal.api.convert import job_cost, profile_fields, usage_fields
from hal.api.deps import admin_dep, agent_dep, caller_dep, check_agent_node, services_dep
from hal.core.errors import (
    InvalidRequest,
    NotConfigured,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from hal.core.job import Job
from hal.core.states import STATES_BY_CODE, JobState
from hal.core.traffic import identity
from hal.observe import traceids
from hal.server.history import find_jobs
from hal.server.observe import joboutput, outputrelay
from hal.server.observe.diag import reset_diag, scheduler_diag
from hal.server.observe.metrics import Collected
from hal.server.observe.plane import ObservePlane
from hal.server.observe.rpc_stats import CountRequests
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.state.node_flags import node_state_flags, power_display
from hal.wire.diag import SchedulerDiag
from hal.wire.output import OutputPoll, OutputReads

ASSETS = Path(__file__).parent / "dashboard"
ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
router = APIRouter()
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]
Agent = Annotated[Caller, Depends(agent_dep)]
Admin = Annotated[Caller, Depends(admin_dep)]
ACTIVE = {JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING}


async def plane_dep(ctx: Ctx) -> ObservePlane:
    if ctx.observe is None:  # (every HalServer has one; an app made without it has not)
        raise NotConfigured("the observability plane is not running in this server")
    return ctx.observe


Plane = Annotated[ObservePlane, Depends(plane_dep)]


def install(app: FastAPI, plane: ObservePlane) -> None:
    """The routes, and ``plane``'s request counts (sdiag's RPC tables) over every route."""
    app.include_router(router)
    ctx: Services = app.state.ctx
    app.add_middleware(CountRequests, counts=plane.requests, tokens=lambda: ctx.tokens)


# -- metrics and alerts -------------------------------------------------------------------
@router.get("/metrics", tags=["observe"], include_in_schema=False)
async def metrics(plane: Plane, request: Request) -> Response:
    # async on purpose: the collector walks the cluster mirror, which only the event
    # loop mutates, so it must run there (a threadpool route could see it mid-change).
    expected = getattr(request.app.state, "metrics_token", None)
    if expected is not None:  # HAL_METRICS_TOKEN / --metrics-token-file
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), expected):
            raise Unauthenticated(
                "/metrics asks for the metrics token: send Authorization: Bearer <token> "
                "(Prometheus: authorization.credentials_file)"
            )
    # the families on the loop, with a turn of it after each (the jobs', the nodes' and
    # the others' are tens of milliseconds each at 10,000 nodes); their text, most of
    # the work (0.1 s and more of CPU with a series per node), in a thread: it reads
    # only what the collectors gave
    families = []
    for family in plane.metrics.registry.collect():
        families.append(family)
        await asyncio.sleep(0)
    body = await asyncio.to_thread(generate_latest, Collected(families))
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/alerts", tags=["observe"])
async def alerts(plane: Plane, _caller: Who) -> dict[str, Any]:
    return {
        "alerts": [a.to_json() for a in plane.alerts.firing()],
        "resolved": [a.to_json() for a in plane.alerts.resolved],
        "webhooks": len(plane.settings.webhooks),
    }


@router.get("/v1/diag", tags=["observe"], response_model=SchedulerDiag)
async def diag(plane: Plane, ctx: Ctx, _caller: Who) -> SchedulerDiag:
    """The scheduler's statistics since the server started or ``sdiag -r`` (``sdiag``);
    any user may read them, as Slurm's sdiag."""
    queued = sum(len(s.outbox) for s in ctx.cluster.agent_sessions.values())
    return scheduler_diag(plane, agent_queue_size=queued)


@router.post("/v1/diag/reset", tags=["observe"], status_code=204)
async def diag_reset(plane: Plane, _admin: Admin) -> Response:
    """``sdiag -r`` (administrators, as Slurm's): sdiag's counters start again from 0;
    ``/metrics`` goes on (``hal.server.observe.diag.reset_diag``)."""
    reset_diag(plane)
    return Response(status_code=204)


# -- dashboard data -----------------------------------------------------------------------
@router.get("/v1/observe/overview", tags=["observe"])
async def overview(plane: Plane, ctx: Ctx, _caller: Who) -> dict[str, Any]:
    c = ctx.cluster
    now = c.clock.now()
    nodes = []
    states: dict[str, int] = {}
    for name in sorted(c.nodes):
        node = c.nodes[name]
        used = c.usage.get(name)
        a = used.allocated if used else None
        display = power_display(c, node, c.node_display_state(node))
        states[display] = states.get(display, 0) + 1
        session = c.agent_sessions.get(name)
        seen = max(node.last_heartbeat, session.last_seen if session else 0.0)
        nodes.append(
            {
                "name": name,
                "state": display,
                # Slurm's flags on it (sinfo's idle*, alloc$): NOT_RESPONDING, MAINTENANCE,
                # RESERVED (state/node_flags.py)
                "flags": node_state_flags(c, node),
                "reason": node.reason,
                "cpus": node.resources.cpus,
                "cpus_alloc": a.cpus if a else 0,
                "memory_bytes": node.resources.memory_bytes,
                "memory_alloc_bytes": a.memory_bytes if a else 0,
                "gpus": node.resources.gpus,
                "gpus_alloc": a.gpus if a else 0,
                "jobs": len(used.jobs) if used else 0,
                "heartbeat_age_s": round(max(0.0, now - seen), 1),
                "topology": list(node.topology),
            }
        )
    by_reason: dict[str, int] = {}
    by_partition: dict[str, dict[str, int]] = {}
    for job in c.jobs.values():
        if job.state not in ACTIVE:
            continue
        part = by_partition.setdefault(job.partition, {"pending": 0, "running": 0})
        if job.state is JobState.PENDING:
            part["pending"] += 1
            by_reason[job.reason.value] = by_reason.get(job.reason.value, 0) + 1
        else:
            part["running"] += 1
    return {
        "cluster": ctx.config.cluster_name,
        "version": __version__,
        "now": now,
        "nodes": nodes,
        "node_states": states,
        "now_sample": _sample_json(plane.sample(now)),
        "history": [_sample_json(s) for s in plane.history],
        "queue": {"by_reason": by_reason, "by_partition": by_partition},
        "scheduler": {
            "cycles": plane.cycles,
            "last_cycle_s": plane.last_cycle_s,  # the pass and its forecast slice
            "last_pass_s": plane.last_pass_s,  # the pass alone
            "last_cycle_at": plane.last_cycle_at,
        },
        "alerts": [a.to_json() for a in plane.alerts.firing()],
        # fair share, predictions and the data plane have their own endpoints
        # (/v1/shares, /v1/predict/status, /v1/data/status), which their tabs read
    }


def _sample_json(s: object) -> dict[str, Any]:
    return {k: getattr(s, k) for k in s.__slots__}  # type: ignore[attr-defined]


def _row(job: Job, now: float) -> dict[str, Any]:
    spec = job.spec
    per = job.allocation.total() if job.allocation else None
    nodes = spec.nodes_min
    want = spec.request_per_node(nodes)
    return {
        "id": job.id,
        "display_id": job.display_id,
        "name": spec.name,
        "user": spec.user,
        "partition": job.partition,
        "state": job.state.value,
        "reason": job.reason.value,
        "priority": job.shown_priority,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "expected_start": job.expected_start,
        "time_limit_s": job.time_limit_s,
        # what it holds, or (pending) what it asks for
        "cpus": per.cpus if per else want.cpus * nodes,
        "gpus": per.gpus if per else want.gpus * nodes,
        "memory_bytes": per.memory_bytes if per else want.memory_bytes * nodes,
        "nodes": list(job.allocation.nodes) if job.allocation else [],
        "cost": job_cost(job, now),  # its cloud nodes' (so far); None: none
    }


SORTS = {
    "id": lambda j: j.id,
    "priority": lambda j: (-j.shown_priority, j.submit_time, j.id),
    "submit": lambda j: (j.submit_time, j.id),
}


@router.get("/v1/observe/queue", tags=["observe"])
async def queue(
    ctx: Ctx,
    _caller: Who,
    state: str = "",
    partition: str = "",
    user: str = "",
    reason: str = "",
    q: str = "",
    sort: str = "priority",
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    states = _states(state)
    if sort not in SORTS:
        raise InvalidRequest(f"sort must be one of {', '.join(SORTS)}", field="sort")
    text = q.strip().lower()
    rows = [
        j
        for j in ctx.cluster.jobs.values()
        if j.state in states
        and (not partition or j.partition == partition)
        and (not user or j.spec.user == user)
        and (not reason or j.reason.value == reason)
        and (not text or text in j.display_id or text in j.spec.name.lower())
    ]
    rows.sort(key=SORTS[sort])
    users = sorted({j.spec.user for j in ctx.cluster.jobs.values()})
    return {
        "total": len(rows),
        "offset": offset,
        "jobs": [_row(j, ctx.cluster.clock.now()) for j in rows[offset : offset + limit]],
        "partitions": sorted(ctx.cluster.partitions),
        "users": users[:200],
    }


def _states(text: str) -> set[JobState]:
    if not text:
        return set(ACTIVE)
    out: set[JobState] = set()
    for name in (t.strip().upper() for t in text.split(",") if t.strip()):
        if name == "ALL":
            return set(JobState)
        state = STATES_BY_CODE.get(name) or JobState.__members__.get(name)
        if state is None:
            raise InvalidRequest(f"Invalid job state specified: {name}", field="state")
        out.add(state)
    return out


@router.get("/v1/observe/traffic", tags=["observe"])
async def traffic(
    ctx: Ctx,
    _caller: Who,
    view: str = "jobs",
    user: str = "",
    partition: str = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    """The Traffic tab: the graph of ``GET /v1/harmonic/graph`` as nodes and edges to
    draw, between running jobs (``view=jobs``) or workloads (``view=workloads``), the
    ``limit`` strongest. ``user`` keeps the edges with one of the user's jobs or
    workloads at an end; ``partition`` those with one of the partition's jobs (and, of
    workloads, those of its jobs' workloads)."""
    if view not in ("jobs", "workloads"):
        raise InvalidRequest("view must be jobs or workloads", field="view")
    graph = ctx.traffic
    if graph is None:
        raise NotConfigured("this server keeps no traffic graph")
    known = ctx.cluster.jobs
    inside = [j for j in known.values() if j.partition == partition] if partition else None
    # one more than drawn, to say when the strongest ``limit`` are not all there is
    found = graph.graph(inside, user or None, limit + 1)
    edges = found.jobs if view == "jobs" else found.identities
    nodes: dict[str, dict[str, Any]] = {}

    def node(key: str | int) -> str:
        if view == "workloads":
            name = str(key)
            nodes.setdefault(name, {"id": name, "label": name, "user": name.split("/", 1)[0]})
            return name
        job = known.get(int(key))
        if job is None:  # ended since the graph's last tick
            nodes.setdefault(str(key), {"id": str(key), "label": str(key), "user": ""})
            return str(key)
        spec = job.spec
        nodes.setdefault(
            job.display_id,
            {
                "id": job.display_id,
                "label": job.display_id,
                "user": spec.user,
                "name": spec.name,
                "identity": identity(spec.user, spec.name, spec.comment),
                "partition": job.partition,
                "state": job.state.value,
                "nodes": list(job.allocation.nodes) if job.allocation else [],
            },
        )
        return job.display_id

    drawn = [
        {"a": node(e.a), "b": node(e.b), "bytes_per_second": e.bytes_per_second, "since": e.since}
        for e in edges[:limit]
    ]
    return {
        "now": found.now,
        "half_life_seconds": found.half_life_s,
        "view": view,
        "nodes": sorted(nodes.values(), key=lambda n: (n["user"], n["id"])),
        "edges": drawn,
        "more": len(edges) > limit,
        "partitions": sorted(ctx.cluster.partitions),
        "users": sorted({j.spec.user for j in known.values()})[:200],
    }


async def _find(ctx: Services, job_id: str) -> Job:
    try:
        return ctx.cluster.resolve(job_id)[0]
    except NotFound:
        found = await find_jobs(ctx.cluster, [job_id], set(), set(), None, set(), None, None, 1)
        if not found:
            raise
        return found[0]


@router.get("/v1/observe/jobs/{job_id}", tags=["observe"])
async def job_detail(job_id: str, plane: Plane, ctx: Ctx, _caller: Who) -> dict[str, Any]:
    job = await _find(ctx, job_id)
    cluster_name = ctx.config.cluster_name
    timeline: list[dict[str, Any]] = [
        {"time": job.submit_time, "event": "submitted", "detail": f"partition {job.partition}"}
    ]
    trail = plane.tracer.trail(job.id)
    if trail is not None:
        for t, event, attrs in trail.events:
            timeline.append({"time": t, "event": event, "detail": ", ".join(attrs.values())})
        for att in trail.attempts:
            timeline.append({"time": att.start, "event": "started", "detail": ",".join(att.nodes)})
            if att.launched_at is not None:
                timeline.append({"time": att.launched_at, "event": "launched", "detail": ""})
            if att.end is not None:
                timeline.append({"time": att.end, "event": att.outcome or "ended", "detail": ""})
    elif job.start_time is not None:
        nodes = ",".join(job.allocation.nodes) if job.allocation else ""
        timeline.append({"time": job.start_time, "event": "started", "detail": nodes})
    if job.end_time is not None:
        timeline.append(
            {
                "time": job.end_time,
                "event": job.state.value.lower(),
                "detail": f"exit code {job.exit_code}"
                + (f", signal {job.exit_signal}" if job.exit_signal else ""),
            }
        )
    timeline.sort(key=lambda e: e["time"])
    return {
        **_row(job, ctx.cluster.clock.now()),
        "exit_code": job.exit_code,
        "restarts": job.restarts,
        **usage_fields(job, ctx.cluster),  # so far, for a running job
        # its measured behaviour (while it runs) and class (kept): the profile panel
        **profile_fields(job, ctx.cluster),
        "workdir": job.spec.workdir,
        "trace_id": traceids.trace_id_hex(cluster_name, job.id, job.submit_time),
        "traceparent": traceids.traceparent(cluster_name, job.id, job.submit_time, job.restarts),
        "timeline": timeline,
    }


# -- job output -----------------------------------------------------------------------------
class TextStream(StreamingResponse):
    """A job's output, so the OpenAPI document says ``text/plain`` (FastAPI documents a
    plain ``StreamingResponse`` as JSON); Starlette adds ``charset=utf-8``."""

    media_type = "text/plain"


@router.get("/v1/jobs/{job_id}/output", tags=["jobs"], response_class=TextStream)
async def job_output(
    job_id: str,
    plane: Plane,
    ctx: Ctx,
    caller: Who,
    stream: str = "stdout",
    offset: Annotated[int, Query(ge=0)] = 0,
    tail_bytes: Annotated[int | None, Query(ge=0)] = None,
    follow: bool = False,
) -> TextStream:
    """The job's output as plain text. ``follow=true`` keeps the response open while the
    job runs (like ``tail -f``) and ends once it has finished and the file is read.
    Read from the control plane's filesystem when the file is there, else from the
    job's agent; the ``Hal-Output-Source`` header says which (``file``/``agent``)."""
    try:
        job = await _find(ctx, job_id)
    except NotFound as err:
        raise NotFound(
            f"no job {job_id}: check the id with `hal squeue` or `hal acct -j {job_id}`",
            field="job_id",
        ) from err
    if not caller.may_modify(job):
        raise PermissionDenied(f"the output of job {job_id} belongs to {job.spec.user}")
    cluster = ctx.cluster

    def finished() -> bool:
        current = cluster.jobs.get(job.id)
        return current is None or current.state.is_terminal or current.restarts != job.restarts

    body: AsyncIterator[bytes]
    try:
        fd = joboutput.open_output(job, stream)
    except Unavailable:  # not on this filesystem: ask the agent of the node that wrote it
        target = outputrelay.OutputTarget.of(job, joboutput.output_path(job, stream))
        body = await outputrelay.relayed_output(
            plane.output_relay, target, offset=offset, tail_bytes=tail_bytes, follow=follow,
            finished=finished,
        )  # fmt: skip
        source = "agent"
    else:
        body = joboutput.read_output(
            fd, offset=offset, tail_bytes=tail_bytes, follow=follow, finished=finished
        )
        source = "file"
    return TextStream(body, headers={"Cache-Control": "no-cache", "Hal-Output-Source": source})


@router.post("/v1/agent/{node}/output", tags=["agent"])
async def agent_output(
    node: str, poll: OutputPoll, plane: Plane, ctx: Ctx, agent: Agent
) -> OutputReads:
    """The agent's long poll of the job-output relay: answers to earlier reads in, the
    next reads out (held up to ``wait_seconds``)."""
    check_agent_node(agent, node)
    if node not in ctx.cluster.nodes:
        raise NotFound(f"node {node} is not registered; the agent registers first")
    return await plane.output_relay.poll(node, poll)


# -- the dashboard --------------------------------------------------------------------------
@router.get("/ui", include_in_schema=False)
async def ui_index() -> HTMLResponse:
    return HTMLResponse((ASSETS / "index.html").read_text(), headers={"Cache-Control": "no-cache"})


@router.get("/ui/static/{name}", include_in_schema=False)
async def ui_asset(name: str) -> FileResponse:
    path = ASSETS / name
    if "/" in name or name.startswith(".") or not path.is_file():
        raise NotFound(f"no dashboard asset {name}")
    return FileResponse(path, media_type=ASSET_TYPES.get(path.suffix, "application/octet-stream"))
