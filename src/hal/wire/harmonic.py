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


class DissonanceCell(WireModel):
    """How much slower jobs of ``victim`` run beside a node full of ``aggressor``."""

    victim: str
    aggressor: str
    slowdown: float  # 1.0: not at all; the prior (1.05) where nothing was observed
    observations: int  # outcomes with some exposure to the aggressor


class Dissonance(WireModel):
    """The learned interference model (``GET /v1/harmonic/dissonance``)."""

    classes: list[str]
    prior: float
    outcomes_learnt: int  # since the server started
    cells: list[DissonanceCell] = Field(default_factory=list)  # victim-major


class EvalFigures(WireModel):
    outcomes: int
    mae: float | None  # mean |predicted - observed| slowdown; None: no outcomes
    baseline_mae: float | None  # the same, predicting no interference


class DissonanceEval(WireModel):
    """The model's predictions against what happened (``GET /v1/harmonic/eval``): each
    outcome predicted by the model as it stood before learning it."""

    window: int  # the last outcomes kept
    all: EvalFigures
    shared: EvalFigures  # outcomes of jobs that had some neighbour of a known class
    by_class: dict[str, EvalFigures] = Field(default_factory=dict)
