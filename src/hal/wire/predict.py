"""The server's run-time predictor (REST ``/v1/predict``)."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel


class PredictAccuracy(WireModel):
    """How the predictions made when jobs started compared with their run times, over the
    last finished jobs (both sides taken as at least 1 s)."""

    jobs: int = 0
    mae_seconds: float | None = None  # mean absolute error
    accuracy: float | None = None  # Tsafrir's: mean of min(p, r) / max(p, r), 1 = perfect
    underprediction_rate: float | None = None  # share of jobs that ran longer than predicted


class PredictStatus(WireModel):
    predictor: str  # user, avg2 or learned
    model_version: int = 0  # 0: no model (user, avg2, learned before its first)
    trained_on: int = 0  # finished jobs the current model was trained on
    model_age_seconds: float | None = None  # since it was trained (or saved, if loaded)
    model_source: str = ""  # loaded (from the data directory), replay (history) or live
    model_path: str | None = None  # where it is persisted (None: not persisted)
    finished_jobs_seen: int = 0  # observed since the server started (replay included)
    replayed_jobs: int = 0  # of those, from the accounting history at start-up
    replaying: bool = False  # the start-up replay is still running
    queued: int = 0  # job starts and ends waiting for the predictor
    recent: PredictAccuracy = Field(default_factory=PredictAccuracy)
    details: dict[str, float] = Field(default_factory=dict)  # the predictor's own figures
    last_error: str = ""


class FinishedPredictionInfo(WireModel):
    """A finished run against what the predictor said when it started."""

    job_id: str
    user: str
    partition: str
    predicted_seconds: float
    actual_seconds: float
    time_limit_seconds: float | None = None  # None: no limit
    end_time: float


class FinishedPredictionList(WireModel):
    predictor: str
    jobs: list[FinishedPredictionInfo]  # newest first
