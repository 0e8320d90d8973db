"""``/v1/harmonic``: the traffic graph (``hal.server.traffic``; ``hal harmonic graph``)
and the interference model (``hal.server.dissonance``; ``hal harmonic dissonance``,
``hal harmonic eval``).

``GET /v1/harmonic/graph`` answers every edge, or with ``job`` (an id as squeue takes it:
``12``, ``12_3``; a finished job too, by its workload) the job's edges to other running
jobs and its workload's, and with ``user`` the edges with one of the user's jobs or
workloads at an end. Any user may read it, as squeue shows every job. An unknown job is
a 404 saying so; a malformed id a 400.

``GET /v1/harmonic/dissonance`` answers the learned slowdown of each ordered pair of job
classes with the observations behind it; ``GET /v1/harmonic/eval`` the model's mean
absolute error on the last job ends, each predicted before it was learnt.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from hal.api.deps import caller_dep, services_dep
from hal.core.errors import NotConfigured, NotFound
from hal.core.job import Job
from hal.core.traffic import identity
from hal.server.dissonance import EVAL_WINDOW, DissonanceService
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.harmonic import (
    Dissonance,
    DissonanceCell,
    DissonanceEval,
    EvalFigures,
    HarmonicGraph,
    IdentityTrafficEdge,
    JobTrafficEdge,
)

router = APIRouter(prefix="/v1/harmonic", tags=["harmonic"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


@router.get("/graph", response_model=HarmonicGraph)
async def graph(
    ctx: Ctx,
    _caller: Who,
    job: Annotated[str | None, Query(max_length=64)] = None,
    user: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> HarmonicGraph:
    """Who talks to whom: bytes per second between running jobs and between workload
    identities, decayed, strongest first (at most ``limit`` of each)."""
    traffic = ctx.traffic
    if traffic is None:
        raise NotConfigured("this server keeps no traffic graph")
    jobs = None if job is None else await _jobs(ctx, job)
    found = traffic.graph(jobs, user, limit)
    known = ctx.cluster.jobs

    def about(job_id: int) -> tuple[str, str, str]:
        j = known.get(job_id)
        if j is None:  # ended since the graph's last tick
            return str(job_id), "", ""
        return j.display_id, j.spec.user, identity(j.spec.user, j.spec.name, j.spec.comment)

    job_edges = []
    for e in found.jobs:
        (a, a_user, a_identity), (b, b_user, b_identity) = about(int(e.a)), about(int(e.b))
        job_edges.append(
            JobTrafficEdge(
                job_id=a,
                user=a_user,
                identity=a_identity,
                peer_job_id=b,
                peer_user=b_user,
                peer_identity=b_identity,
                bytes_per_second=e.bytes_per_second,
                since=e.since,
                updated=e.updated,
            )
        )
    identity_edges = [
        IdentityTrafficEdge(
            identity=str(e.a),
            peer_identity=str(e.b),
            bytes_per_second=e.bytes_per_second,
            since=e.since,
            updated=e.updated,
        )
        for e in found.identities
    ]
    return HarmonicGraph(
        now=found.now,
        half_life_seconds=found.half_life_s,
        jobs=job_edges,
        identities=identity_edges,
    )


@router.get("/dissonance", response_model=Dissonance)
async def dissonance(ctx: Ctx, _caller: Who) -> Dissonance:
    """Which classes of work slow which down, learned from job ends."""
    service = _dissonance(ctx)
    matrix, counts = service.matrix()
    return Dissonance(
        classes=list(service.model.classes),
        prior=service.model.prior,
        outcomes_learnt=service.learnt,
        cells=[
            DissonanceCell(victim=v, aggressor=a, slowdown=s, observations=counts[v][a])
            for v, row in matrix.items()
            for a, s in row.items()
        ],
    )


@router.get("/eval", response_model=DissonanceEval)
async def evaluation(ctx: Ctx, _caller: Who) -> DissonanceEval:
    """The model's predictions on the last job ends against what happened."""
    found = _dissonance(ctx).evaluation()
    return DissonanceEval(
        window=EVAL_WINDOW,
        all=EvalFigures(**found["all"]),
        shared=EvalFigures(**found["shared"]),
        by_class={k: EvalFigures(**v) for k, v in found["by_class"].items()},
    )


def _dissonance(ctx: Services) -> DissonanceService:
    if ctx.dissonance is None:
        raise NotConfigured("this server keeps no interference model")
    return ctx.dissonance


async def _jobs(ctx: Services, ident: str) -> list[Job]:
    """The jobs ``ident`` names: in the mirror, else (a finished job) in the store."""
    try:
        return ctx.cluster.resolve(ident)
    except NotFound:
        if not ident.strip().isdigit():
            raise
    stored = await ctx.cluster.db(ctx.cluster.store.jobs_by_id, [int(ident)])
    if not stored:
        raise NotFound(
            f"job {ident.strip()} is unknown: no job has this id (hal squeue lists the "
            "jobs in the queue, hal sacct the ended ones)",
            field="job",
        )
    return stored
