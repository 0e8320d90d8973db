"""Users' crontabs over REST (``/v1/crontab/{user}``, ``scrontab``; docs/user/scrontab.md)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hal.wire.base import WireModel
from hal.wire.submit import JobSubmit, bind_limits

bind_limits()  # pydantic evaluates JobSubmit's annotations below

MAX_CRONTAB_BYTES = 1_000_000
MAX_ENTRIES = 10_000


class CrontabPut(WireModel):
    """A user's whole crontab file, and one job per entry in the file's order: the
    entry's command as its script, its ``#SCRON`` options read as sbatch reads them (by
    the client, as Slurm's scrontab does). The server reads the schedules from
    ``text`` and sets each job's begin time to its entry's next run."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    text: str = Field(max_length=MAX_CRONTAB_BYTES)
    jobs: list[JobSubmit] = Field(default_factory=list, max_length=MAX_ENTRIES)


class CrontabInfo(WireModel):
    user: str
    text: str  # the file as saved (with any entry scancel commented out: #DISABLED:)
    job_ids: list[int] = Field(default_factory=list)  # its entries' jobs, pending or running


class CrontabRemoved(WireModel):
    user: str
    cancelled: list[int] = Field(default_factory=list)  # the pending jobs cancelled
