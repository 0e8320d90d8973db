"""``/v1/jobs``: submit (one, many, test-only), list, show, cancel, hold, release, suspend,
resume, requeue,
update, script."""

from __future__ import annotations

import hashlib
from signal import SIGKILL
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse
from pydantic import ValidationError

from hal.api.convert import job_info, nul_field
from hal.api.deps import caller_dep, services_dep
from hal.api.fastpath import body_schema, is_json, json_response, not_json, read_body
from hal.api.job_list import JOB_DEFAULTS, field_set, history_body, job_list_body
from hal.api.list_warmer import QUEUE_STATES, lifespan
from hal.api.submit import spec_of, submission
from hal.core.errors import InvalidRequest, NotFound, PermissionDenied
from hal.core.job import Job
from hal.core.partition_list import partitions_of
from hal.core.states import STATES_BY_CODE, JobState
from hal.server.history import find_jobs
from hal.server.services import Services
from hal.slurm.syntax import compress_hostlist
from hal.state import commands
from hal.state.cluster import Caller
from hal.state.codec import allocation_from_json
from hal.state.store import StepRow, SubmitKey
from hal.wire.jobs import (
    BatchSubmitResult,
    HetSubmit,
    HetSubmitResult,
    JobBatchSubmit,
    JobInfo,
    JobList,
    JobRun,
    JobSubmit,
    JobUpdate,
    StepGpuUsage,
    StepRecord,
    SubmitResult,
    WillRun,
)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], lifespan=lifespan)
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]
# sent again with the same value, a submission answers with the jobs it gave the first time
IdempotencyKey = Annotated[
    str | None,
    Header(
        description="A new UUID per submission: a client that lost the answer sends the "
        "submission again with the same key and gets the same jobs (kept a day)"
    ),
]


@router.post(
    "", status_code=201, response_model=SubmitResult, openapi_extra=body_schema("JobSubmit")
)
async def submit(
    request: Request, ctx: Ctx, caller: Who, idempotency_key: IdempotencyKey = None
) -> Response:
    body = await read_body(request, JobSubmit)
    specs = await submission(ctx, [body], caller)
    key = await submit_key(request, caller, idempotency_key)
    done = await ctx.cluster.submit(specs, key=key)
    result = SubmitResult(job_id=done[0].job_id, task_ids=list(done[0].task_ids))
    return json_response(result, 201)


@router.post(
    "/batch",
    status_code=201,
    response_model=BatchSubmitResult,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/JobBatchSubmit"}}
            },
        }
    },
)
async def submit_batch(
    request: Request, ctx: Ctx, caller: Who, idempotency_key: IdempotencyKey = None
) -> Response:
    """Submit many jobs in one transaction: all are accepted or none.

    The body is validated straight from JSON bytes (pydantic-core), which is several times
    faster than FastAPI's parse-then-validate for batches of thousands of jobs."""
    if not is_json(request):
        raise not_json()
    try:
        body = JobBatchSubmit.model_validate_json(await request.body())
    except ValidationError as err:
        raise RequestValidationError(err.errors()) from err
    if len(body.jobs) > ctx.config.max_batch_jobs:
        raise InvalidRequest(
            f"a batch holds at most {ctx.config.max_batch_jobs} jobs; split it", field="jobs"
        )
    specs = await submission(ctx, body.jobs, caller, "jobs")
    key = await submit_key(request, caller, idempotency_key)
    done = await ctx.cluster.submit(specs, key=key)
    result = BatchSubmitResult(
        results=[SubmitResult(job_id=d.job_id, task_ids=list(d.task_ids)) for d in done]
    )
    return Response(result.model_dump_json(), status_code=201, media_type="application/json")


async def submit_key(request: Request, caller: Caller, key: str | None) -> SubmitKey | None:
    """The submission's ``Idempotency-Key`` header, if sent: the same key sent again by
    the same user answers with the jobs of the first request (``hal.state.resync``)."""
    if key is None:
        return None
    if not 0 < len(key) <= 255 or not key.isascii() or not key.isprintable():
        raise InvalidRequest(
            "the Idempotency-Key header takes 1 to 255 printable ASCII characters; "
            "send a new UUID with each submission",
            field="Idempotency-Key",
        )
    # the route and the body: the same body sent to another route is another submission
    digest = hashlib.sha256(request.url.path.encode() + b"\n" + await request.body())
    return SubmitKey(caller.name, key, digest.hexdigest())


@router.post("/het", status_code=201, response_model=HetSubmitResult)
async def submit_het(
    request: Request,
    body: HetSubmit,
    ctx: Ctx,
    caller: Who,
    idempotency_key: IdempotencyKey = None,
) -> HetSubmitResult:
    """A heterogeneous job (Slurm's hetjob): its components get consecutive ids, the
    first is the het job id; the scheduler starts all of them together or none."""
    specs = await submission(ctx, body.components, caller, "components")
    key = await submit_key(request, caller, idempotency_key)
    done = await ctx.cluster.submit(specs, het=True, key=key)
    return HetSubmitResult(job_id=done[0].job_id, component_ids=[d.job_id for d in done])


@router.post("/het/test", response_model=list[WillRun])
async def test_only_het(body: HetSubmit, ctx: Ctx, caller: Who) -> list[WillRun]:
    """``sbatch --test-only`` of a het job: where and when every component would start
    (one start time for all), without submitting."""
    return await ctx.will_run_het(await submission(ctx, body.components, caller, "components"))


@router.post("/test", response_model=WillRun)
async def test_only(body: JobSubmit, ctx: Ctx, caller: Who) -> WillRun:
    """``sbatch --test-only``: validate and estimate the start without submitting."""
    spec = spec_of(ctx, body, caller.name)
    await ctx.prime([spec])  # [data]: the estimate sees where inputs are
    return await ctx.will_run(spec)


def _parse_list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _states(text: str | None) -> set[JobState] | None:
    names = _parse_list(text)
    if not names or any(n.lower() == "all" for n in names):
        return None
    out: set[JobState] = set()
    for n in names:
        up = n.upper()
        if up in STATES_BY_CODE:
            out.add(STATES_BY_CODE[up])
        elif up in JobState.__members__:
            out.add(JobState[up])
        else:
            raise InvalidRequest(f"Invalid job state specified: {n}", field="state")
    return out


FIELDS_DOC = (
    "Only these of each job's fields (JobInfo's names, comma-separated; e.g. "
    "id,display_id,state,partition): `squeue` asks for those its format shows. Without "
    "it, every field. A name JobInfo does not have is refused (400) with those it has."
)
OMIT_DEFAULTS_DOC = (
    "Leave out of each job the fields whose value is their default (JobInfo's schema "
    "`default`: null, 0, false, an empty string or list): a reader takes a field that "
    "is not there as its default. A nested object (steps, runs, gpu_usage, profile) is "
    "sent whole. `squeue` asks for it (ADR 0028)."
)


@router.get("", response_model=JobList)
async def list_jobs(
    ctx: Ctx,
    _caller: Who,
    state: str | None = None,
    user: str | None = None,
    partition: str | None = None,
    name: str | None = None,
    id: str | None = None,
    all: bool = False,
    history: bool = False,
    start_after: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    end_before: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    limit: Annotated[int, Query(ge=1, le=1_000_000)] = 1_000_000,
    fields: Annotated[str | None, Query(description=FIELDS_DOC)] = None,
    omit_defaults: Annotated[bool, Query(description=OMIT_DEFAULTS_DOC)] = False,
) -> Response:
    """The queue (``squeue``), or with ``history`` every job ever run (``sacct``); each
    job with every field, or with ``fields`` only those named; ``omit_defaults``: less
    those at their default."""
    wanted = field_set(fields)
    wanted_states = _states(state)
    users, parts, names = (
        set(_parse_list(user)),
        set(_parse_list(partition)),
        set(_parse_list(name)),
    )
    ids = _parse_list(id)
    if history:
        jobs = await find_jobs(
            ctx.cluster, ids, users, names, wanted_states, parts, start_after, end_before, limit
        )
    else:
        if ids:
            jobs = []
            for ident in ids:
                try:
                    jobs.extend(ctx.cluster.resolve(ident))
                except NotFound:
                    continue
        else:
            jobs = list(ctx.cluster.jobs.values())
        default_states = None if (all or ids or state) else QUEUE_STATES
        keep = wanted_states or default_states
        jobs = [
            j
            for j in jobs
            if (keep is None or j.state in keep)
            and (not users or j.spec.user in users)
            and (not parts or not parts.isdisjoint(partitions_of(j)))
            and (not names or j.spec.name in names)
        ]
        jobs.sort(key=lambda j: j.id)
        jobs = jobs[:limit]
    service = ctx.service

    def give_way() -> bool:  # (a pass being decided: ``hal.api.job_list._turn``)
        return service.deciding

    if not history:  # the queue, from each job's JSON kept between requests
        body = await job_list_body(jobs, ctx.cluster, wanted, omit_defaults, give_way)
        return Response(body, media_type="application/json")
    steps = await _steps(ctx, jobs) if wanted is None or "steps" in wanted else {}
    runs = await _runs(ctx, jobs) if wanted is None or "runs" in wanted else {}
    if wanted is not None or omit_defaults:  # (sacct: each field worked out alone)
        body = await history_body(jobs, ctx.cluster, wanted, omit_defaults, steps, runs, give_way)
        return Response(body, media_type="application/json")
    infos = [job_info(j, ctx.cluster) for j in jobs]
    for info in infos:
        info.steps = steps.get(info.id, [])
        info.runs = runs.get(info.id, [])
    return json_response(JobList(jobs=infos))


def document(openapi: dict[str, Any]) -> None:
    """Say in ``openapi`` that a job of ``GET /v1/jobs`` with ``fields`` holds only those:
    its answer is a ``JobList``, or, with ``fields`` or ``omit_defaults``, a
    ``JobListFields`` (JobInfo's fields, none required)."""
    schemas = openapi["components"]["schemas"]
    some = {key: value for key, value in schemas["JobInfo"].items() if key != "required"}
    # every default, a factory's too: what omit_defaults leaves out
    some["properties"] = {
        name: {**prop, "default": JOB_DEFAULTS[name]} if name in JOB_DEFAULTS else prop
        for name, prop in some["properties"].items()
    }
    some["title"] = "JobInfoFields"
    some["description"] = (
        "A job's fields asked for with fields= (JobInfo's, any subset); with "
        "omit_defaults, less those at their schema default"
    )
    schemas["JobInfoFields"] = some
    schemas["JobListFields"] = {
        "type": "object",
        "title": "JobListFields",
        "properties": {
            "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/JobInfoFields"}}
        },
        "required": ["jobs"],
    }
    content = openapi["paths"]["/v1/jobs"]["get"]["responses"]["200"]["content"]
    content["application/json"]["schema"] = {
        "anyOf": [
            {"$ref": "#/components/schemas/JobList"},
            {"$ref": "#/components/schemas/JobListFields"},
        ]
    }


async def _runs(ctx: Services, jobs: list[Job]) -> dict[int, list[JobRun]]:
    """The earlier runs of the requeued jobs among ``jobs`` (sacct -D), oldest first, by
    job id."""
    requeued = [j.id for j in jobs if j.restarts]
    if not requeued:
        return {}
    found: dict[int, list[JobRun]] = {}
    for row in await ctx.cluster.db(ctx.cluster.store.runs_of, requeued):
        allocation = allocation_from_json(row.allocation)
        found.setdefault(row.job_id, []).append(
            JobRun(
                attempt=row.attempt,
                state=row.state,
                exit_code=row.exit_code,
                exit_signal=row.exit_signal,
                partition=row.partition,
                submit_time=row.submit_time,
                eligible_time=row.eligible_time,
                start_time=row.start_time,
                end_time=row.end_time,
                nodes=list(allocation.nodes) if allocation is not None else [],
                cost=row.cost or None,
                max_rss_bytes=row.max_rss,
                cpu_seconds=row.cpu_seconds,
                interrupted_at=row.interrupted_at,
                lost_work_seconds=row.lost_work,
            )
        )
    return found


def _step_gpu(row: StepRow) -> StepGpuUsage | None:
    """A recorded step's GPU use, None where its tasks were not read for GPUs."""
    if row.gpu_max_mem_bytes is None:
        return None
    return StepGpuUsage(
        max_mem_bytes=row.gpu_max_mem_bytes,
        ave_mem_bytes=row.gpu_ave_mem_bytes or 0,
        max_util=row.gpu_max_util or 0,
        ave_util=row.gpu_ave_util or 0.0,
    )


async def _steps(ctx: Services, jobs: list[Job]) -> dict[int, list[StepRecord]]:
    """The jobs' steps for sacct, by job id, in order of run and step: those ended
    (accounting) and those running (memory)."""
    if not jobs:
        return {}
    rows = await ctx.cluster.db(ctx.cluster.store.steps_of, [j.id for j in jobs])
    found: dict[int, dict[tuple[int, int], StepRecord]] = {}  # job → (run, step) → it
    for row in rows:
        found.setdefault(row.job_id, {})[(row.attempt, row.step_id)] = StepRecord(
            step_id=row.step_id,
            attempt=row.attempt,
            name=row.name,
            nodelist=row.nodelist,
            ntasks=row.ntasks,
            state=row.state,
            exit_code=row.exit_code,
            start_time=row.start_time,
            end_time=row.end_time,
            exit_signal=row.exit_signal,
            max_rss_bytes=row.max_rss_bytes,
            max_rss_node=row.max_rss_node,
            max_rss_task=row.max_rss_task,
            ave_rss_bytes=row.ave_rss_bytes,
            total_cpu_seconds=row.total_cpu_seconds,
            user_cpu_seconds=row.user_cpu_seconds,
            system_cpu_seconds=row.system_cpu_seconds,
            gpu=_step_gpu(row),
            cpus=row.cpus,
            memory_bytes=row.memory_bytes,
            cancelled_by=row.cancelled_by,
            with_job=row.with_job,
        )
    wanted = {j.id for j in jobs}
    for (job_id, attempt, step_id), step in ctx.steps.steps.items():
        if job_id in wanted and not step.done:
            found.setdefault(job_id, {})[(attempt, step_id)] = StepRecord(
                step_id=step_id,
                attempt=attempt,
                name=step.name,
                nodelist=compress_hostlist(list(step.layout.nodes)),
                ntasks=step.layout.ntasks,
                state=step.state,
                exit_code=0,
                start_time=step.start_time,
                cpus=step.cpu_count,
                memory_bytes=step.memory_bytes,
            )
    return {job_id: [steps[n] for n in sorted(steps)] for job_id, steps in found.items()}


def _one(ctx: Services, ident: str) -> Job:
    jobs = ctx.cluster.resolve(ident)
    return jobs[0]


def _with_prediction(info: JobInfo, job: Job, ctx: Services) -> JobInfo:
    if ctx.predictions is None:
        return info
    found = ctx.predictions.estimate(job, ctx.cluster.clock.now())
    if found is None:
        return info
    runtime, end = found
    info.predicted_runtime_seconds = round(runtime, 1)
    info.predicted_end = None if end is None else round(end, 1)
    return info


@router.get("/{job_id}", response_model=JobInfo)
async def show(job_id: str, ctx: Ctx, _caller: Who) -> JobInfo:
    try:
        job = _one(ctx, job_id)
        return _with_prediction(job_info(job, ctx.cluster), job, ctx)
    except NotFound:
        found = await find_jobs(ctx.cluster, [job_id], set(), set(), None, set(), None, None, 1)
        if not found:
            raise
        return job_info(found[0], ctx.cluster)


@router.get("/{job_id}/script", response_class=PlainTextResponse)
async def script(job_id: str, ctx: Ctx, caller: Who) -> str:
    try:
        job = _one(ctx, job_id)
    except NotFound:
        found = await find_jobs(ctx.cluster, [job_id], set(), set(), None, set(), None, None, 1)
        if not found:
            raise
        job = found[0]
    if not caller.may_modify(job):
        raise PermissionDenied(f"the script of job {job_id} belongs to {job.spec.user}")
    return job.spec.script


@router.delete("/{job_id}")
async def cancel(
    job_id: str,
    ctx: Ctx,
    caller: Who,
    signal: int | None = None,
    batch_only: bool = False,
    steps_only: bool = False,
) -> dict[str, object]:
    """Cancel, or with ``signal`` signal: every process of the job, its batch shell
    alone (``batch_only``), or its steps alone (``steps_only``: scancel's default for a
    signal other than SIGKILL, which leaves the batch shell be)."""
    if signal is not None and not 1 <= signal <= 64:
        raise InvalidRequest(f"invalid signal number {signal}", field="signal")
    if steps_only and signal is not None and signal != SIGKILL:
        return {"job_ids": await _signal_steps(ctx, job_id, caller, signal)}
    return {
        "job_ids": await commands.cancel(ctx.cluster, job_id, caller, signal, batch_only=batch_only)
    }


async def _signal_steps(ctx: Services, ident: str, caller: Caller, signum: int) -> list[int]:
    """``signum`` to the running steps of the jobs ``ident`` names (none: nothing, as
    Slurm's scancel of a job with no step); the ids of those running."""
    jobs = ctx.cluster.resolve(ident)
    commands.authorise(jobs, caller)
    live = sorted(j.id for j in jobs if j.state.is_active)
    for job_id in live:
        for step in ctx.steps.of_job(job_id, caller):
            await ctx.steps.cancel(step, signum)
    return live


@router.post("/{job_id}/command-exit")
async def command_exit(
    job_id: str, ctx: Ctx, caller: Who, exit_code: int, signal: int = 0
) -> dict[str, object]:
    """Record the exit status the running job ends with when its batch script exits:
    salloc's command's, for its allocation (``hal.state.command_exit``)."""
    from hal.state import command_exit

    return {"job_ids": await command_exit.record(ctx.cluster, job_id, caller, exit_code, signal)}


@router.post("/{job_id}/hold")
async def hold_job(job_id: str, ctx: Ctx, caller: Who, user: bool = False) -> dict[str, object]:
    """``user=true``: a hold the job's owner may release (``scontrol uhold``), also when
    an administrator places it."""
    return {"job_ids": await commands.set_hold(ctx.cluster, job_id, caller, True, user_hold=user)}


@router.post("/{job_id}/release")
async def release_job(job_id: str, ctx: Ctx, caller: Who) -> dict[str, object]:
    return {"job_ids": await commands.set_hold(ctx.cluster, job_id, caller, False)}


@router.post("/{job_id}/suspend")
async def suspend_job(job_id: str, ctx: Ctx, caller: Who) -> dict[str, object]:
    return {"job_ids": await commands.suspend(ctx.cluster, job_id, caller)}


@router.post("/{job_id}/resume")
async def resume_job(job_id: str, ctx: Ctx, caller: Who) -> dict[str, object]:
    return {"job_ids": await commands.suspend(ctx.cluster, job_id, caller, resume=True)}


@router.post("/{job_id}/requeue")
async def requeue_job(job_id: str, ctx: Ctx, caller: Who, hold: bool = False) -> dict[str, object]:
    """``hold`` (``scontrol requeuehold``): the job comes back held by its owner. A job
    whose pinned artifacts were removed since it ended is refused: it could not start."""
    for job in ctx.cluster.resolve(job_id):
        ctx.artifacts.check_still_there(job)
    return {"job_ids": await commands.requeue(ctx.cluster, job_id, caller, hold=hold)}


@router.patch("/{job_id}", response_model=JobInfo)
async def update_job(job_id: str, body: JobUpdate, ctx: Ctx, caller: Who) -> JobInfo:
    fields = body.model_dump(exclude_none=True)
    nul = nul_field(fields)
    if nul is not None:
        raise InvalidRequest(
            f"{nul}: holds a NUL character (\\u0000), which no job field may hold; remove it",
            field=nul,
        )
    changed = await commands.update(ctx.cluster, job_id, caller, **fields)
    return job_info(changed[0], ctx.cluster)
