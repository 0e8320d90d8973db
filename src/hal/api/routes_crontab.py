"""``/v1/crontab/{user}``: a user's crontab (``scrontab -l|-e|-r|FILE``, docs/user/scrontab.md).
A user reads and changes their own; an administrator anyone's (``scrontab -u USER``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Depends

from hal.api.deps import caller_dep, services_dep
from hal.api.submit import spec_of
from hal.core.errors import HalError, InvalidRequest, NotFound, PermissionDenied
from hal.core.job import CronSpec, JobSpec
from hal.server.services import Services
from hal.slurm.crontab import next_run, parse_crontab
from hal.state import crontabs
from hal.state.cluster import Caller
from hal.wire.crontab import CrontabInfo, CrontabPut, CrontabRemoved

router = APIRouter(prefix="/v1/crontab", tags=["crontab"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


def _allowed(user: str, caller: Caller) -> None:
    if user != caller.name and not caller.admin:
        raise PermissionDenied(
            f"only an administrator may read or change {user}'s crontab; "
            "leave out -u to use your own"
        )


def _job_ids(ctx: Services, user: str) -> list[int]:
    return sorted(j.id for j in crontabs.current_jobs(ctx.cluster, user))


@router.get("/{user}", response_model=CrontabInfo)
async def show_crontab(user: str, ctx: Ctx, caller: Who) -> CrontabInfo:
    _allowed(user, caller)
    text = await crontabs.stored_text(ctx.cluster, user)
    if text is None:
        raise NotFound(f"no crontab for {user}")
    return CrontabInfo(user=user, text=text, job_ids=_job_ids(ctx, user))


@router.put("/{user}", response_model=CrontabInfo)
async def put_crontab(user: str, body: CrontabPut, ctx: Ctx, caller: Who) -> CrontabInfo:
    """Replace ``user``'s crontab: every entry is checked (its schedule here, its options
    as a submission) before anything changes; the old entries' pending jobs are
    cancelled and each new entry gets a job pending until its next run."""
    _allowed(user, caller)
    entries = parse_crontab(body.text)
    if len(entries) != len(body.jobs):
        raise InvalidRequest(
            f"the crontab has {len(entries)} entries but {len(body.jobs)} jobs were sent; "
            "send one job per entry, in the file's order",
            field="jobs",
        )
    now = ctx.cluster.clock.now()
    specs: list[JobSpec] = []
    lines = [e.line for e in entries]
    with _naming_lines(lines):
        for i, (entry, job) in enumerate(zip(entries, body.jobs, strict=True)):
            where = f"jobs[{i}]."
            spec = ctx.cluster.admission.for_caller(spec_of(ctx, job, user, where), caller, where)
            if spec.array is not None:
                raise InvalidRequest("a cron job cannot be a job array", field=where + "array")
            cron = CronSpec(entry.schedule, entry.first_line, entry.line)
            specs.append(spec.with_changes(cron=cron, begin_time=next_run(entry.schedule, now)))
        await crontabs.replace(ctx.cluster, user, body.text, specs, caller.name)
    return CrontabInfo(user=user, text=body.text, job_ids=_job_ids(ctx, user))


_ENTRY = re.compile(r"^jobs\[(\d+)\]\.")


@contextmanager
def _naming_lines(lines: list[int]) -> Iterator[None]:
    """A refusal of one entry's job starts "line N: " (N: the entry's line in the file),
    as scrontab reports a bad line; the submit checks name the job by its index (or none
    when there is one)."""
    try:
        yield
    except HalError as err:
        if err.field is None or type(err).__init__ is not HalError.__init__:
            raise  # not about one entry (a limit, the database away)
        found = _ENTRY.match(err.field)
        if found is not None:
            index = int(found.group(1))
        elif len(lines) == 1:
            index = 0
        else:
            raise
        raise type(err)(f"line {lines[index]}: {err.message}", field=err.field) from err


@router.delete("/{user}", response_model=CrontabRemoved)
async def delete_crontab(user: str, ctx: Ctx, caller: Who) -> CrontabRemoved:
    """``scrontab -r``: the pending jobs of its entries are cancelled; a running one ends
    its run and is not queued again."""
    _allowed(user, caller)
    cancelled = await crontabs.remove(ctx.cluster, user, caller.name)
    return CrontabRemoved(user=user, cancelled=cancelled)
