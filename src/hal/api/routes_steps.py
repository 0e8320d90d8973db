"""``/v1/jobs/{id}/steps``: job steps (ADR 0012). ``srun`` inside a job creates one,
reads its tasks' output and forwards its signals; the job's owner or an administrator
only."""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from hal.api.convert import nul_field
from hal.api.deps import caller_dep, services_dep
from hal.api.fastpath import body_schema, json_response, read_body
from hal.core.errors import InvalidRequest
from hal.server.services import Services
from hal.slurm.distribution import parse_distribution
from hal.slurm.multi_prog import parse_multi_prog
from hal.slurm.steps import StepRequest
from hal.state.cluster import Caller
from hal.state.steps import Step
from hal.wire.steps import (
    MAX_WAIT_SECONDS,
    StepCancelRequest,
    StepChunk,
    StepClose,
    StepCreate,
    StepInfo,
    StepInputChunk,
    StepInputReply,
    StepList,
    StepOutputPage,
    StepSignalRequest,
    TaskUsage,
)

INPUT_WAIT_SECONDS = 10.0  # srun's input request, while the step's buffer is full
router = APIRouter(prefix="/v1/jobs", tags=["steps"])
listing = APIRouter(prefix="/v1/steps", tags=["steps"])  # every job's (squeue -s)
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


def _info(step: Step) -> StepInfo:
    return StepInfo(
        job_id=step.job_id,
        step_id=step.step_id,
        name=step.name,
        nodes=list(step.layout.nodes),
        tasks=list(step.layout.tasks),
        state=step.state,
        exit_code=step.exit_code,
        start_time=step.start_time,
        local=step.local,
        srun=step.srun,
        cpus={node: list(held) for node, held in step.cpus.items()},
        cpu_count=step.cpu_count,
        memory_bytes=step.memory_bytes,
        cancelled_at=step.cancelled_at,
        cancel_reason=step.cancel_reason,
        usage=[
            TaskUsage(
                rank=rank,
                node=node,
                rss_bytes=u.rss_bytes,
                max_rss_bytes=u.max_rss_bytes,
                cpu_seconds=u.cpu_seconds,
                gpu=u.gpu,
            )
            for rank, (node, u) in sorted(step.usage.items())
        ],
    )


@router.get("/{job_id}/steps", response_model=StepList)
async def list_steps(job_id: int, ctx: Ctx, caller: Who) -> Response:
    """The job's running steps, with their tasks' latest usage samples (``sstat``)."""
    return json_response(StepList(steps=[_info(s) for s in ctx.steps.of_job(job_id, caller)]))


@router.post(
    "/{job_id}/steps",
    status_code=201,
    response_model=StepInfo,
    openapi_extra=body_schema("StepCreate"),
)
async def create_step(job_id: int, request: Request, ctx: Ctx, caller: Who) -> Response:
    """Start a step of a running job on nodes of its allocation (Slurm's srun)."""
    body = await read_body(request, StepCreate)
    nul = nul_field(body.model_dump())
    if nul is not None:  # no process argument or environment can hold one
        raise InvalidRequest(f"{nul}: holds a NUL character (\\u0000); remove it", field=nul)
    wanted = StepRequest(
        body.nodes,
        body.ntasks,
        body.ntasks_per_node,
        tuple(body.nodelist),
        parse_distribution(body.distribution),
        gpus=body.gpus,
        gpus_per_node=body.gpus_per_node,
        gpus_per_task=body.gpus_per_task,
        cpus_per_task=body.cpus_per_task,
        exact=body.exact,
        overlap=body.overlap,
        mem_per_node=body.mem_per_node,
        mem_per_cpu=body.mem_per_cpu,
        time_limit_s=body.time_limit_seconds,
    )
    if body.local:  # srun runs it on the batch node: numbered and recorded only
        if len(body.nodelist) != 1:
            raise InvalidRequest("a local step names its one node in nodelist", field="nodelist")
        name = body.name or body.argv[0]
        local = await ctx.steps.open_local(
            job_id, caller, body.nodelist[0], body.ntasks or 1, name, wanted, srun=body.srun
        )
        return json_response(_info(local), 201)
    mpmd = body.multi_prog
    programs = None if mpmd is None else parse_multi_prog(mpmd.text, mpmd.name)
    step = await ctx.steps.create(
        job_id,
        caller,
        wanted,
        body.argv,
        body.environment,
        name=body.name,
        multi_prog=programs,
        workdir=body.workdir,
        only_environment=body.only_environment,
        kill_on_bad_exit=body.kill_on_bad_exit,
        stdin=body.input,
        relay_input=body.relay_input,
        input_rank=body.input_rank,
        pty=_size(body.pty, "pty"),
    )
    return json_response(_info(step), 201)


def _size(given: list[int] | None, field: str) -> tuple[int, int] | None:
    """A terminal's [rows, columns], each 1 to 65535 (a terminal's own limits)."""
    if given is None:
        return None
    rows, columns = given
    if not (0 < rows < 1 << 16 and 0 < columns < 1 << 16):
        raise InvalidRequest(f"{field}: rows and columns are 1 to 65535", field=field)
    return rows, columns


@router.get("/{job_id}/steps/{step_id}/output", response_model=StepOutputPage)
async def step_output(
    job_id: int,
    step_id: int,
    ctx: Ctx,
    caller: Who,
    after: Annotated[int, Query(ge=0)] = 0,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0.0,
) -> Response:
    """The tasks' output past cursor ``after`` (held up to ``wait`` s for some), and the
    step's state; what srun has read (up to ``after``) is dropped."""
    step = ctx.steps.get(job_id, step_id, caller)
    chunks = await ctx.steps.read(step, after, wait)
    ctx.steps.time_up(step)  # its job's time is up: srun says the step is ending for it
    page = StepOutputPage(
        chunks=[
            StepChunk(rank=rank, stream=stream, data_b64=base64.b64encode(data).decode())  # type: ignore[arg-type]
            for _, rank, stream, data in chunks
        ],
        cursor=chunks[-1][0] if chunks else after,
        state=step.state,
        exit_code=step.srun_exit_code,
        dropped_bytes=step.dropped,
        cancelled_at=step.cancelled_at,
        cancel_reason=step.cancel_reason,
        job_cancelled=step.with_job and step.cancelled_at is not None and not step.cancel_reason,
        kill_wait_seconds=ctx.cluster.config.kill_wait_seconds,
        bad_exit=step.bad_exit,
    )
    return json_response(page)


@router.post(
    "/{job_id}/steps/{step_id}/input",
    response_model=StepInputReply,
    openapi_extra=body_schema("StepInputChunk"),
)
async def step_input(
    job_id: int, step_id: int, request: Request, ctx: Ctx, caller: Who
) -> Response:
    """srun's stdin for the step's tasks (``StepCreate.relay_input``), by offset: a resend
    is skipped; held up to ``INPUT_WAIT_SECONDS`` while the step's buffer is full. The
    reply says from where srun sends on."""
    body = await read_body(request, StepInputChunk)
    try:
        data = base64.b64decode(body.data_b64, validate=True)
    except ValueError:
        raise InvalidRequest("data_b64: not base64", field="data_b64") from None
    step = ctx.steps.get(job_id, step_id, caller)
    size = _size(body.winsize, "winsize")
    if size is not None:
        ctx.steps.resize(step, *size)
    if size is not None and not data and not body.eof:
        return json_response(StepInputReply(offset=body.offset))  # (a resize alone)
    got = await ctx.steps.take_input(
        step, body.offset, data, body.eof, INPUT_WAIT_SECONDS, body.kept
    )
    reply = StepInputReply(offset=got.offset, given=got.given, closed=got.closed, lost=got.lost)
    return json_response(reply)


@router.post(
    "/{job_id}/steps/{step_id}/signal",
    response_model=StepInfo,
    openapi_extra=body_schema("StepSignalRequest"),
)
async def signal_step(
    job_id: int, step_id: int, request: Request, ctx: Ctx, caller: Who
) -> Response:
    """Send a signal to the step's tasks on every node (srun forwards SIGINT/SIGTERM);
    409 for a step srun runs on the batch node (its tasks are srun's to signal)."""
    body = await read_body(request, StepSignalRequest)
    step = ctx.steps.get(job_id, step_id, caller)
    ctx.steps.signal(step, body.signal)
    return json_response(_info(step))


@router.post(
    "/{job_id}/steps/{step_id}/cancel",
    response_model=StepInfo,
    openapi_extra=body_schema("StepCancelRequest"),
)
async def cancel_step(
    job_id: int, step_id: int, request: Request, ctx: Ctx, caller: Who
) -> Response:
    """``scancel JOB.STEP``: kill the step's tasks on every node, on the batch node too
    (it ends CANCELLED); with ``signal`` (``scancel -s SIG JOB.STEP``) only send that.
    409 for a step that has ended."""
    body = await read_body(request, StepCancelRequest)
    step = ctx.steps.get(job_id, step_id, caller)
    await ctx.steps.cancel(step, body.signal, caller.name)
    return json_response(_info(step))


@router.post(
    "/{job_id}/steps/{step_id}/end",
    response_model=StepInfo,
    openapi_extra=body_schema("StepClose"),
)
async def end_step(job_id: int, step_id: int, request: Request, ctx: Ctx, caller: Who) -> Response:
    """srun's report that a step it ran on the batch node (``local``) has ended: its
    exit code and signal, and what its tasks used, kept for sacct as an agent's report is."""
    body = await read_body(request, StepClose)
    step = ctx.steps.get(job_id, step_id, caller)
    await ctx.steps.end_local(
        step,
        body.exit_code,
        body.exit_signal,
        oom=body.oom,
        cancelled=body.cancelled,
        timed_out=body.timed_out,
        tasks=body.tasks,
    )
    return json_response(_info(step))


@listing.get("", response_model=StepList)
async def running_steps(ctx: Ctx, caller: Who) -> Response:
    """Every job's running steps, by job and step id (``squeue -s``; no usage)."""
    del caller  # any authenticated user sees the queue's steps, as squeue's jobs
    steps = ctx.steps.current()
    return json_response(StepList(steps=[_info(s).model_copy(update={"usage": []}) for s in steps]))
