"""The facade's application, mounted at ``/slurm/v0.0.45`` (and ``/slurm/v0.0.44``).

A mounted FastAPI application rather than a router: its refusals (a bad token, no such
path, a HAL error) must come back in Slurm's envelope, not as the problem+json answers of
HAL's own API, and exception handlers belong to an application.

Authentication is HAL's bearer token, sent as slurmrestd's ``X-SLURM-USER-TOKEN`` (with
``X-SLURM-USER-NAME``, which must then name the token's user) or as ``Authorization:
Bearer``; every route takes it, as every ``/v1`` route does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import time
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from hal.api.cloud_nodes import CloudNodes, cloud_nodes, cluster_nodes, one_node
from hal.api.convert import job_info, partition_info
from hal.api.deps import authenticated
from hal.api.slurmrest import desc, views
from hal.api.slurmrest.envelope import (
    ACCESS_DENIED,
    ALREADY_DONE,
    EINVAL,
    INVALID_JOB_ID,
    INVALID_NODE_NAME,
    INVALID_PARTITION_NAME,
    JOB_FINISHED,
    PROTOCOL_AUTHENTICATION_ERROR,
    REQUESTED_NODE_CONFIG_UNAVAILABLE,
    REST_FAIL_PARSING,
    REST_INVALID_JOBS_DESC,
    REST_INVALID_QUERY,
    SLURM_ERROR,
    SlurmRestError,
    envelope,
    http_status,
)
from hal.api.submit import submission
from hal.core.errors import (
    Conflict,
    HalError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from hal.core.job import Job, licenses_held
from hal.core.states import JobState
from hal.server.history import find_jobs
from hal.server.services import Services
from hal.slurm.syntax import parse_signal_name
from hal.state import commands
from hal.state.cluster import Caller
from hal.wire.jobs import JobUpdate
from hal.wire.nodes import NodeInfo, kept_warning
from hal.wire.slurm_json import ApiVersion, no_val

log = logging.getLogger("hal.api.slurmrest")


def create_facade(ctx: Services, parent: FastAPI, version: ApiVersion) -> FastAPI:
    app = FastAPI(
        title=f"HAL slurmrestd facade ({version.data_parser})",
        docs_url=None,
        redoc_url=None,
        description="Slurm REST API shapes over HAL (docs/reference/slurmrest.md).",
    )
    app.state.ctx = ctx
    app.state.parent = parent
    app.state.version = version
    _install_errors(app)
    for path, fn, methods in ROUTES:
        app.add_api_route(path, fn, methods=methods, response_class=JSONResponse)
    return app


# -- answers and refusals -------------------------------------------------------------------


def answer(request: Request, body: dict[str, Any], **kw: Any) -> JSONResponse:
    ctx: Services = request.app.state.ctx
    who: Caller | None = getattr(request.state, "caller", None)
    return envelope(
        request.app.state.version,
        ctx.config.cluster_name,
        body,
        user=who.name if who else "",
        source=request.client.host if request.client else "",
        **kw,
    )


def _refusal(err: HalError) -> SlurmRestError:
    """A refusal of HAL's cluster is slurmctld's: HTTP 500 with Slurm's number, as
    slurmrestd answers (docs/slurm-checks.md "slurmrestd")."""
    if isinstance(err, Unauthenticated):
        return SlurmRestError(401, PROTOCOL_AUTHENTICATION_ERROR, err.message)
    if isinstance(err, PermissionDenied):
        return SlurmRestError(500, ACCESS_DENIED, err.message)
    if isinstance(err, NotFound):
        return SlurmRestError(500, INVALID_JOB_ID, err.message)
    if isinstance(err, Conflict) and (
        "already completing or completed" in err.message
        or err.message.startswith("Job has already finished")
    ):
        return SlurmRestError(500, JOB_FINISHED, err.message, "job_id")
    if isinstance(err, InvalidRequest):
        field = err.field or ""
        if field.endswith("partition"):
            return SlurmRestError(500, INVALID_PARTITION_NAME, err.message, f"job.{field}")
        if err.message.startswith("Requested node configuration"):
            return SlurmRestError(500, REQUESTED_NODE_CONFIG_UNAVAILABLE, err.message)
        return SlurmRestError(500, EINVAL, err.message, f"job.{field}" if field else "")
    return SlurmRestError(500, SLURM_ERROR, err.message)


def _install_errors(app: FastAPI) -> None:
    async def slurm_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, SlurmRestError)
        found = answer(request, err.body, errors=[err.entry()], status=err.status)
        if err.status == 401:
            found.headers["WWW-Authenticate"] = "Bearer"
        return found

    async def hal_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, HalError)
        return await slurm_error(request, _refusal(err))

    async def http_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, HTTPException)
        text = (
            f"no such path {request.url.path} in HAL's slurmrestd facade "
            "(docs/reference/slurmrest.md)"
            if err.status_code == 404
            else f"{request.method} {request.url.path}: {err.detail}"
        )
        return await slurm_error(request, SlurmRestError(err.status_code, REST_INVALID_QUERY, text))

    async def invalid(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, RequestValidationError)
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        text = f"{where}: {first.get('msg', 'invalid request')}"
        return await slurm_error(request, SlurmRestError(400, REST_INVALID_QUERY, text, where))

    app.add_exception_handler(SlurmRestError, slurm_error)
    app.add_exception_handler(HalError, hal_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)


# -- authentication -------------------------------------------------------------------------


async def caller_dep(request: Request) -> Caller:
    token = request.headers.get("x-slurm-user-token")
    authorization = f"Bearer {token}" if token else request.headers.get("authorization")
    if not authorization:
        raise SlurmRestError(
            401,
            PROTOCOL_AUTHENTICATION_ERROR,
            "missing token: send a HAL token as X-SLURM-USER-TOKEN (with X-SLURM-USER-NAME) "
            "or 'Authorization: Bearer <token>'; `hal user token NAME` makes one",
        )
    who = await authenticated(request, authorization)  # /v1's: the same tokens, cached
    if who.agent:
        raise SlurmRestError(
            403, ACCESS_DENIED, f"{who.name}'s token is an agent token; use a user's token"
        )
    name = request.headers.get("x-slurm-user-name")
    if name and name != who.name:
        raise SlurmRestError(
            401,
            PROTOCOL_AUTHENTICATION_ERROR,
            f"X-SLURM-USER-NAME {name!r} is not the token's user ({who.name}); HAL acts only "
            "as the token's user",
        )
    request.state.caller = who
    return who


Who = Annotated[Caller, Depends(caller_dep)]


def _ctx(request: Request) -> Services:
    ctx: Services = request.app.state.ctx
    return ctx


async def _body(request: Request) -> object:
    raw = await request.body()
    try:
        return json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as err:
        raise SlurmRestError(400, REST_FAIL_PARSING, f"the body is not JSON: {err}") from err


# -- jobs -----------------------------------------------------------------------------------


async def submit(request: Request, caller: Who) -> JSONResponse:
    ctx = _ctx(request)
    req, parsed = desc.read_submit(await _body(request))
    if req is None:
        status = http_status(parsed.errors)
        return answer(request, {}, errors=parsed.errors, warnings=parsed.warnings, status=status)
    # slurmrestd submits from its own host: Slurm's AllocNode is slurmrestd's hostname
    req = dataclasses.replace(req, submit_host=socket.gethostname())
    specs = await submission(ctx, [req], caller)  # as POST /v1/jobs: nice, [data]
    done = await ctx.cluster.submit(specs)
    body = {"job_id": done[0].job_id, "step_id": "batch", "job_submit_user_msg": ""}
    return answer(request, body, warnings=parsed.warnings)


async def _jobs_of(ctx: Services, ident: str) -> list[Job]:
    """The jobs ``ident`` names (a job, an array, ``123_4``): the mirror's, else history's."""
    try:
        return ctx.cluster.resolve(ident)
    except NotFound:
        pass
    except InvalidRequest as err:
        # slurmrestd 22.05.8 answers a job id it cannot read so (``GET /job/abc``)
        raise SlurmRestError(400, REST_INVALID_JOBS_DESC, err.message, "job_id") from err
    found = await find_jobs(ctx.cluster, [ident], set(), set(), None, set(), None, None, 10_000)
    if not found:
        # slurmrestd 22.05.8's answer, word for word, with its empty list
        raise SlurmRestError(
            500, INVALID_JOB_ID, f"Unable to find JobId={ident}", "job_id", {"jobs": []}
        )
    return found


def _job_list(request: Request, jobs: list[Job]) -> JSONResponse:
    ctx = _ctx(request)
    name = ctx.config.cluster_name
    infos = [views.job_info(job_info(j, ctx.cluster), name) for j in sorted(jobs, key=_id)]
    now = int(ctx.cluster.clock.now())
    return answer(
        request, {"jobs": infos, "last_backfill": no_val(None), "last_update": no_val(now)}
    )


def _id(job: Job) -> int:
    return job.id


async def list_jobs(request: Request, _caller: Who) -> JSONResponse:
    """Every job the control plane holds in memory (pending, running, and those ended
    within ``min_job_age_seconds``), as slurmctld answers."""
    return _job_list(request, list(_ctx(request).cluster.jobs.values()))


async def show_job(request: Request, job_id: str, _caller: Who) -> JSONResponse:
    return _job_list(request, await _jobs_of(_ctx(request), job_id))


async def cancel_job(
    request: Request,
    job_id: str,
    caller: Who,
    signal: str | None = None,
    flags: str | None = None,
) -> JSONResponse:
    """Cancel, or with ``signal`` (a name or number) signal; ``flags=BATCH_JOB`` signals
    only the batch script. A job that already ended is a success, as slurmrestd answers;
    its ``status`` entry carries Slurm's 2021."""
    ctx = _ctx(request)
    try:
        number = parse_signal_name(signal) if signal else None
    except InvalidRequest as err:
        raise SlurmRestError(400, REST_INVALID_QUERY, err.message, "signal") from err
    jobs = await _jobs_of(ctx, job_id)
    if not any(j.state.is_active or j.state is JobState.PENDING for j in jobs):
        code, text = ALREADY_DONE
        return answer(request, {"status": [_kill_status(j.id, code, text) for j in jobs]})
    wanted = {f.strip().upper() for f in (flags or "").split(",") if f.strip()}
    done = await commands.cancel(
        ctx.cluster, job_id, caller, number, batch_only="BATCH_JOB" in wanted
    )
    return answer(request, {"status": [_kill_status(i) for i in done]})


def _kill_status(job_id: int, code: int = 0, text: str = "") -> dict[str, object]:
    return {
        "job_id": no_val(job_id),
        "step_id": "",
        "error": {"string": text, "code": code, "message": text},
        "federation": {"sibling": ""},
    }


async def update_job(request: Request, job_id: str, caller: Who) -> JSONResponse:
    """``scontrol update job`` over REST: the body is a ``job_desc_msg`` of the changes."""
    ctx = _ctx(request)
    parsed = desc.read_update(await _body(request))
    if parsed.errors:
        status = http_status(parsed.errors)
        return answer(request, {}, errors=parsed.errors, warnings=parsed.warnings, status=status)
    fields = dict(parsed.fields)
    hold = fields.pop("hold", None)
    ids = [j.id for j in await _jobs_of(ctx, job_id)]
    if fields:
        try:
            checked = JobUpdate(**fields).model_dump(exclude_none=True)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise SlurmRestError(
                400, REST_FAIL_PARSING, f"job.{where}: {first['msg']}", where
            ) from err
        ids = [j.id for j in await commands.update(ctx.cluster, job_id, caller, **checked)]
    if hold is not None:
        ids = await commands.set_hold(ctx.cluster, job_id, caller, hold, user_hold=not caller.admin)
    results = [{"job_id": i, "step_id": "", "error": "", "error_code": 0, "why": ""} for i in ids]
    return answer(request, {"results": results}, warnings=parsed.warnings)


# -- nodes, partitions, licenses, ping, diag ------------------------------------------------


def _cloud(request: Request) -> CloudNodes:
    """The ``[cloud]`` groups' nodes (``hal.api.cloud_nodes``): the autoscaler is the
    parent application's."""
    return cloud_nodes(_ctx(request).cloud)


def _nodes(request: Request, infos: list[NodeInfo]) -> JSONResponse:
    c = _ctx(request).cluster
    cluster = _ctx(request).config.cluster_name
    nodes = [views.node(info, cluster) for info in infos]
    return answer(request, {"nodes": nodes, "last_update": no_val(int(c.clock.now()))})


async def list_nodes(request: Request, _caller: Who) -> JSONResponse:
    """The registered nodes and the ``[cloud]`` groups' nodes not created yet
    (``state: ["IDLE", "CLOUD", "POWERED_DOWN"]``), as ``GET /v1/nodes``."""
    return _nodes(request, cluster_nodes(_ctx(request).cluster, _cloud(request)))


async def show_node(request: Request, node_name: str, _caller: Who) -> JSONResponse:
    info = one_node(node_name, _ctx(request).cluster, _cloud(request))
    if info is None:
        raise SlurmRestError(
            500, INVALID_NODE_NAME, f"Invalid node name specified: {node_name}", "node_name"
        )
    return _nodes(request, [info])


def _partitions(request: Request, names: list[str]) -> JSONResponse:
    ctx = _ctx(request)
    c = ctx.cluster
    cloud = _cloud(request)
    out = []
    for name in names:
        info = partition_info(c.partitions[name], c, ctx.config.preemption, cloud)
        # (a group's node not created yet counts its group's CPUs, as Slurm's cloud nodes)
        cpus = sum(
            c.nodes[n].resources.cpus if n in c.nodes else cloud.groups[n].resources.cpus
            for n in info.nodes
            if n in c.nodes or n in cloud.groups
        )
        out.append(views.partition(info, cpus, ctx.config.cluster_name))
    return answer(request, {"partitions": out, "last_update": no_val(int(c.clock.now()))})


async def list_partitions(request: Request, _caller: Who) -> JSONResponse:
    return _partitions(request, list(_ctx(request).cluster.partitions))


async def show_partition(request: Request, partition_name: str, _caller: Who) -> JSONResponse:
    if partition_name not in _ctx(request).cluster.partitions:
        raise SlurmRestError(
            500,
            INVALID_PARTITION_NAME,
            f"Invalid partition name specified: {partition_name}",
            "partition_name",
        )
    return _partitions(request, [partition_name])


async def licenses(request: Request, _caller: Who) -> JSONResponse:
    ctx = _ctx(request)
    used = licenses_held(ctx.cluster.unfinished.values())
    now = int(ctx.cluster.clock.now())
    out = [
        {
            "LicenseName": name,
            "Total": total,
            "Used": used[name],
            "Free": max(0, total - used[name]),
            "Remote": False,
            "Reserved": 0,
            "LastUpdate": now,
        }
        for name, total in sorted(ctx.config.licenses.items())
    ]
    return answer(request, {"licenses": out, "last_update": no_val(now)})


async def ping(request: Request, _caller: Who) -> JSONResponse:
    """The control plane answers (this is it) and its database with it: the latency is
    one round trip to the store, in microseconds."""
    c = _ctx(request).cluster
    start = time.perf_counter()
    try:
        await c.db(c.store.ping)
        responding = True
    except HalError:
        responding = False
    latency = round((time.perf_counter() - start) * 1e6)
    entry = {
        "hostname": socket.gethostname(),
        "pinged": "UP" if responding else "DOWN",
        "latency": latency,
        "mode": "primary",
        "primary": True,
        "responding": responding,
    }
    return answer(request, {"pings": [entry]})


async def diag(request: Request, _caller: Who) -> JSONResponse:
    """sdiag's numbers (``GET /v1/diag``) under Slurm's names; times in microseconds."""
    from hal.server.observe.diag import scheduler_diag

    plane = _ctx(request).observe
    if plane is None:
        raise SlurmRestError(503, SLURM_ERROR, "this server runs without its observe plane")
    d = scheduler_diag(plane)
    # Slurm's main schedule: the passes, without the forecast slices after them
    last, longest, total, _ = d.main_schedule()

    def us(seconds: float) -> int:
        return round(seconds * 1e6)

    stats = {
        "req_time": no_val(int(d.now)),
        "req_time_start": no_val(int(d.since)),
        "jobs_submitted": d.jobs_submitted,
        "jobs_started": d.jobs_started,
        "jobs_completed": d.jobs_completed,
        "jobs_canceled": d.jobs_canceled,
        "jobs_failed": d.jobs_failed,
        "jobs_pending": d.jobs_pending,
        "jobs_running": d.jobs_running,
        "job_states_ts": no_val(int(d.now)),
        "schedule_cycle_max": us(longest),
        "schedule_cycle_last": us(last),
        "schedule_cycle_sum": us(total),
        "schedule_cycle_total": d.cycles,
        "schedule_cycle_mean": us(total / d.cycles) if d.cycles else 0,
        "schedule_cycle_mean_depth": d.total_depth // d.cycles if d.cycles else 0,
        "schedule_cycle_depth": d.total_depth,
        "schedule_queue_length": d.last_queue_length,
        "bf_backfilled_jobs": d.backfill_jobs,
        "bf_cycle_counter": d.backfill_cycles,
        "bf_cycle_last": us(d.backfill_last_cycle_s),
        "bf_cycle_max": us(d.backfill_max_cycle_s),
        "bf_cycle_sum": us(d.backfill_total_cycle_s),
        "bf_cycle_mean": (
            us(d.backfill_total_cycle_s / d.backfill_cycles) if d.backfill_cycles else 0
        ),
        "bf_last_depth": d.backfill_last_depth,
        "bf_depth_sum": d.backfill_total_depth,
        "bf_when_last_cycle": no_val(int(d.backfill_last_when) or None),
        "bf_active": False,
    }
    return answer(request, {"statistics": stats})


async def reconfigure(request: Request, caller: Who) -> JSONResponse:
    """``scontrol reconfigure`` (administrators): the server re-reads its hal.toml. A
    file with a mistake or a partition still in use: the error, nothing changed; a
    setting that changes only at restart: a warning naming it."""
    ctx = _ctx(request)
    if not caller.admin:
        raise PermissionDenied(f"user {caller.name} is not an administrator")
    if ctx.reconfigure is None:
        raise SlurmRestError(503, SLURM_ERROR, "this server cannot re-read its configuration")
    try:
        done = await ctx.reconfigure(caller.name)
    except HalError as err:  # slurmctld's refusal (500), about the file: no job.FIELD source
        raise SlurmRestError(500, SLURM_ERROR, err.message) from err
    said = [(kept_warning(key), key) for key in done.kept]
    said += [(text, "partitions") for text in done.warnings]
    warnings: list[dict[str, object]] = [{"description": d, "source": s} for d, s in said]
    return answer(request, {}, warnings=warnings)


# (path, handler, methods); slurmrestd's paths end in "/" where they list
ROUTES: list[tuple[str, Any, list[str]]] = [
    ("/job/submit", submit, ["POST"]),
    ("/jobs/", list_jobs, ["GET"]),
    ("/job/{job_id}", show_job, ["GET"]),
    ("/job/{job_id}", update_job, ["POST"]),
    ("/job/{job_id}", cancel_job, ["DELETE"]),
    ("/nodes/", list_nodes, ["GET"]),
    ("/node/{node_name}", show_node, ["GET"]),
    ("/partitions/", list_partitions, ["GET"]),
    ("/partition/{partition_name}", show_partition, ["GET"]),
    ("/licenses/", licenses, ["GET"]),
    ("/ping/", ping, ["GET"]),
    ("/diag/", diag, ["GET"]),
    ("/reconfigure/", reconfigure, ["GET"]),
]
