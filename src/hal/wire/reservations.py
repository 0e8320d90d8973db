"""Advance reservations over REST (``/v1/reservations``). Times are Unix seconds; the
Slurm forms (``now+1hour``, ``2:00:00``) are read by ``scontrol`` before sending."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hal.wire.base import WireModel
from hal.wire.bounds import LATEST_SECONDS

_NAME = r"^[A-Za-z0-9_.-]{1,128}$"


class ReservationInfo(WireModel):
    name: str
    start_time: float  # the window in force now, or the next one
    end_time: float
    duration_seconds: float
    nodes: list[str]
    node_count: int
    core_count: int
    users: list[str] = Field(default_factory=list)
    accounts: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)  # Slurm's order; PURGE_COMP=<seconds>
    partition: str = ""
    state: str  # ACTIVE while a window is in force, else INACTIVE


class ReservationList(WireModel):
    reservations: list[ReservationInfo]


class ReservationCreate(WireModel):
    """``start_time`` absent: now. Exactly one of ``end_time`` and ``duration_seconds``;
    exactly one of ``nodes`` (``["ALL"]``: every node) and ``node_count``; at least one
    of ``users`` and ``accounts``. ``name`` absent or empty: Slurm's ``<first account,
    else first user>_<n>``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    name: str = Field(default="", pattern=r"^$|" + _NAME)
    start_time: float | None = Field(default=None, ge=0, le=LATEST_SECONDS)
    end_time: float | None = Field(default=None, ge=0, le=LATEST_SECONDS)
    duration_seconds: float | None = Field(default=None, gt=0, le=LATEST_SECONDS)
    nodes: list[str] | None = None
    node_count: int | None = Field(default=None, ge=1)
    users: list[str] = Field(default_factory=list)
    accounts: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    partition: str = ""


class ReservationUpdate(WireModel):
    """Only the fields given change (``start_time`` alone keeps the duration)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    start_time: float | None = Field(default=None, ge=0, le=LATEST_SECONDS)
    end_time: float | None = Field(default=None, ge=0, le=LATEST_SECONDS)
    duration_seconds: float | None = Field(default=None, gt=0, le=LATEST_SECONDS)
    nodes: list[str] | None = None
    node_count: int | None = Field(default=None, ge=1)
    users: list[str] | None = None
    accounts: list[str] | None = None
    flags: list[str] | None = None
    partition: str | None = None
