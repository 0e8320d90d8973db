"""The traffic graph: who talks to whom (REST ``GET /v1/harmonic/graph``, ``hal harmonic
graph``; docs/harmonic.md)."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel


class JobTrafficEdge(WireModel):
    """Two running jobs that exchange TCP traffic; ``job_id`` is the end the question
    asked about (``--job``, ``--user``)."""

    job_id: str
    user: str
    identity: str  # its workload identity: user/NAME, or user/LABEL (--comment=harmonic=LABEL)
    peer_job_id: str
    peer_user: str
    peer_identity: str
    bytes_per_second: float  # both directions together, decayed ([harmonic] half_life)
    since: float  # when the first bytes between them were measured (Unix seconds)
    updated: float  # when bytes were last measured


class IdentityTrafficEdge(WireModel):
    """Two workloads whose jobs exchange TCP traffic (kept over restarts and new
    submissions); ``identity`` is the end the question asked about. The same identity at
    both ends: jobs of one workload talking to each other."""

    identity: str
    peer_identity: str
    bytes_per_second: float
    since: float
    updated: float


class HarmonicGraph(WireModel):
    now: float  # when the rates were computed
    half_life_seconds: float
    jobs: list[JobTrafficEdge] = Field(default_factory=list)  # strongest first
    identities: list[IdentityTrafficEdge] = Field(default_factory=list)  # strongest first
