"""The agent's state directory: one folder per supervised job.

::

    <state_dir>/
      agent.lock             flock held by the running agent (one agent per directory)
      kill_wait              the server's KillWait, so a restarted agent can end an
                             overdue job before the server is back
      jobs/<job>.<attempt>/  mode 0711: the job's user may traverse, not list
        script               the batch script (owned by the job's user, 0700)
        record.json          the state machine's JobRecord        (agent)
        plan.json            the StepPlan: argv, environment, paths, user   (agent)
        supervisor           "<pid> <start ticks>" of the step supervisor   (launcher)
        started              "<job pid> <start time>"              (supervisor)
        status.json          exit status, rusage, OOM — or a launch error (supervisor)

Each file has a single writer and is replaced atomically (write, rename), so a reader
never sees half a file — except ``plan.json`` and the first ``record.json``, written in
place while the folder is new and nobody reads it yet. ``record.json`` is not rewritten
when a job merely starts: ``started`` holds that, and adoption replays it. A folder is
removed only after the server acknowledged the job's final report.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from hal.agent.handshake import PLAN_FILE, SUPERVISOR_FILE, read_recorded, write_atomic
from hal.agent.records import ExitOutcome, JobRecord
from hal.agent.supervisor import (
    STARTED_FILE,
    STATUS_FILE,
    STOPPING_FILE,
    read_started,
    read_status,
)
from hal.core.errors import Conflict

RECORD_FILE = "record.json"
# Slurm's name for the spooled copy (its $0 is <spool>/job<ID>/slurm_script): scripts
# that test `basename $0` find the same word under HAL
SCRIPT_FILE = "slurm_script"
KILL_WAIT_FILE = "kill_wait"
JOB_FILES = (
    SCRIPT_FILE, RECORD_FILE, PLAN_FILE, SUPERVISOR_FILE, STARTED_FILE, STATUS_FILE, STOPPING_FILE
)  # fmt: skip


class StateDirLocked(Conflict):
    """Another agent already uses this state directory (a user's mistake, not a bug:
    ``hal agent`` says so in one line, exit 5)."""


@dataclass(frozen=True, slots=True)
class StoredJob:
    """What an earlier agent left behind for one job."""

    record: JobRecord
    job_dir: str
    supervisor: tuple[int, int] | None  # (pid, start ticks)
    started: tuple[int, float] | None  # (job pid, start time)
    status: ExitOutcome | str | None  # the end, a launch error, or not ended yet


class JobStore:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.jobs_dir = state_dir / "jobs"
        self._lock_fd: int | None = None

    def open(self) -> None:
        """Create the directories and take the lock (fails if another agent holds it)."""
        for directory in (self.state_dir, self.jobs_dir):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o711)  # traversable for the jobs' users, not listable
        fd = os.open(self.state_dir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            raise StateDirLocked(
                f"another agent is running with state directory {self.state_dir}; stop it, "
                "or give this one its own --state-dir"
            ) from err
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load_kill_wait(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.state_dir / KILL_WAIT_FILE).read_text())
        return None

    def save_kill_wait(self, seconds: int) -> None:
        write_atomic(str(self.state_dir), KILL_WAIT_FILE, str(seconds))

    def job_dir(self, job_id: int, attempt: int) -> str:
        return str(self.jobs_dir / f"{job_id}.{attempt}")

    def create(
        self, record: JobRecord, script: str, owner: tuple[int, int] | None, plan: str = ""
    ) -> str:
        """Make the job's folder with its script, step plan and first record."""
        job_dir = self.job_dir(record.job_id, record.attempt)
        if os.path.isdir(job_dir):
            shutil.rmtree(job_dir)  # a stale folder of a launch that never started
        os.mkdir(job_dir, 0o711)
        # 0711: the job's user must reach its script; mkdir's mode is masked by the umask.
        os.chmod(job_dir, 0o711)  # noqa: S103
        script_path = os.path.join(job_dir, SCRIPT_FILE)
        fd = os.open(script_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        try:
            os.write(fd, script.encode())
            if owner is not None:
                os.fchown(fd, *owner)
        finally:
            os.close(fd)
        # Written in place, not through a temporary file: nothing reads the new folder
        # until the launcher is told about it, and a crash before that leaves a folder
        # without a supervisor, which is never started (a half-written record is skipped
        # by ``load`` and the folder replaced when the launch comes again).
        if plan:
            _write_new(job_dir, PLAN_FILE, plan)
        _write_new(job_dir, RECORD_FILE, record.to_json())
        return job_dir

    def save_record(self, record: JobRecord) -> None:
        job_dir = self.job_dir(record.job_id, record.attempt)
        if os.path.isdir(job_dir):
            write_atomic(job_dir, RECORD_FILE, record.to_json())

    def remove(self, job_id: int, attempt: int) -> None:
        """Delete the job's folder: its known files, then the folder (``rmtree`` costs
        several times more system calls and runs once per job)."""
        job_dir = self.job_dir(job_id, attempt)
        for name in JOB_FILES:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(job_dir, name))
        try:
            os.rmdir(job_dir)
        except FileNotFoundError:
            pass
        except OSError:  # something else is left (a temporary file of a crashed writer)
            shutil.rmtree(job_dir, ignore_errors=True)

    def load(self) -> list[StoredJob]:
        """Every job folder with a readable record; unreadable ones are left for an
        operator to inspect (they name the job) rather than deleted."""
        found: list[StoredJob] = []
        for entry in sorted(os.scandir(self.jobs_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            try:
                with open(os.path.join(entry.path, RECORD_FILE)) as f:
                    record = JobRecord.from_json(f.read())
            except (OSError, ValueError, TypeError, KeyError):
                continue
            found.append(
                StoredJob(
                    record=record,
                    job_dir=entry.path,
                    supervisor=read_recorded(entry.path),
                    started=read_started(entry.path),
                    status=read_status(entry.path),
                )
            )
        return found


def _write_new(directory: str, name: str, text: str) -> None:
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
