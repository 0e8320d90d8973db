"""What the learned predictor knows about a job: its request and the recent history of its
user, its user's same-named jobs and its account, as one float vector.

History is updated only by ``observe`` (a finished job), so a feature vector never holds
anything from a job's own future or from jobs that have not finished yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from hal.core.job import Job
from hal.core.states import JobState

FloatRow = npt.NDArray[np.float64]
NAMES = (
    "log_requested",
    "log_cpus",
    "log_mem_mib",
    "hour",
    "weekday",
    "user",
    "name",
    "account",
    "queue",
    "user_last",
    "user_avg2",
    "user_mean8",
    "user_ratio8",
    "user_log_count",
    "user_fail8",
    "user_same_request",
    "name_last",
    "name_mean4",
    "account_mean8",
    "account_ratio8",
    "shape_last",
    "shape_mean4",
    "shape_log_count",
)
CATEGORICAL = tuple(NAMES.index(n) for n in ("user", "name", "account", "queue"))
_NAN = math.nan
_FAILED = frozenset({JobState.FAILED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY})


# The baseline the model corrects (it learns log(actual) - baseline): the last run of the
# user's job of the same shape, else the average of the user's last two, else the request.
_BASE = (NAMES.index("shape_last"), NAMES.index("user_avg2"), NAMES.index("log_requested"))


def baseline(row: FloatRow) -> float:
    for i in _BASE:
        if not math.isnan(row[i]):
            return float(row[i])
    return 0.0


def baselines(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out = rows[:, _BASE[-1]].copy()
    for i in reversed(_BASE[:-1]):
        out = np.where(np.isnan(rows[:, i]), out, rows[:, i])
    return out


class _Runs:
    """The last ``keep`` finished jobs of one key (a user's job name, a user's job
    shape): their log run times, oldest first, and how many there were in all. Plain
    lists: a replay keeps one of these for every shape a user ever asked for (tens of
    thousands on a big trace), and a ``deque`` costs about 600 bytes even empty."""

    __slots__ = ("count", "keep", "logs")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.logs: list[float] = []
        self.count = 0

    def add_run(self, log_run: float) -> None:
        logs = self.logs
        logs.append(log_run)
        if len(logs) > self.keep:
            del logs[0]
        self.count += 1


class _Recent(_Runs):
    """``_Runs`` of a user or an account, with the actual/requested ratios, failures,
    and the last requested time."""

    __slots__ = ("failed", "last_request", "ratios")

    def __init__(self, keep: int) -> None:
        super().__init__(keep)
        self.ratios: list[float] = []
        self.failed: list[float] = []
        self.last_request = _NAN

    def add(self, log_run: float, ratio: float, failed: bool, requested: float) -> None:
        self.add_run(log_run)
        ratios, fails = self.ratios, self.failed
        ratios.append(ratio)
        fails.append(1.0 if failed else 0.0)
        if len(ratios) > self.keep:
            del ratios[0], fails[0]
        self.last_request = requested


def _mean(values: Iterable[float]) -> float:
    seq = list(values)
    return sum(seq) / len(seq) if seq else _NAN


def _entry(table: dict[Any, _Recent], key: object, keep: int) -> _Recent:
    recent = table.get(key)
    if recent is None:
        recent = table[key] = _Recent(keep)
    return recent


def _runs(table: dict[Any, _Runs], key: object, keep: int) -> _Runs:
    runs = table.get(key)
    if runs is None:
        runs = table[key] = _Runs(keep)
    return runs


def requested_s(job: Job) -> float:
    return float(job.time_limit_s) if job.time_limit_s > 0 else 365.0 * 86400.0


class History:
    """Per-user, per-(user, name) and per-account recent history, and the integer codes of
    categorical values (first seen, first numbered; a loaded model brings the codes it was
    trained with)."""

    def __init__(self) -> None:
        self._users: dict[str, _Recent] = {}
        self._names: dict[tuple[str, str], _Runs] = {}
        self._accounts: dict[str, _Recent] = {}
        # the user's jobs of the same shape (request and size): most often the same job
        self._shapes: dict[tuple[str, float, int], _Runs] = {}
        self._codes: dict[tuple[int, str], int] = {}
        self._next_code = 0
        self.version: dict[str, int] = {}  # per user: bumped when its history changes
        # account → (mean log run time, mean ratio) as of the last ``freeze_accounts``:
        # an account's history moves with every job of every user in it (on HPC2N one
        # account holds 99 % of the jobs), so features read it as of the last model, and
        # a job's features change only with its user's history or the model. Read live,
        # they would depend on when a waiting job was last asked.
        self._frozen: dict[str, tuple[float, float]] = {}

    def _code(self, kind: int, value: str) -> float:
        key = (kind, value)
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = self._next_code
            self._next_code += 1
        return float(code)

    def features(self, job: Job) -> FloatRow:
        spec = job.spec
        requested = requested_s(job)
        cpus = spec.ntasks * spec.cpus_per_task
        mem = spec.memory_per_node_bytes or (spec.memory_per_cpu_bytes or 0) * cpus
        account = spec.account or ""
        user = self._users.get(spec.user)
        named = self._names.get((spec.user, spec.name))
        acct = self._frozen.get(account)
        shape = self._shapes.get((spec.user, requested, cpus))
        row = np.full(len(NAMES), _NAN)
        row[0] = math.log1p(requested)
        row[1] = math.log1p(max(cpus, spec.nodes_min))
        row[2] = math.log1p(mem / 2**20)
        row[3] = (job.submit_time % 86400.0) / 3600.0
        row[4] = (job.submit_time // 86400.0) % 7
        row[5] = self._code(0, spec.user)
        row[6] = self._code(1, f"{spec.user}/{spec.name}")
        row[7] = self._code(2, account)
        row[8] = self._code(3, f"{job.partition}/{spec.qos or ''}")
        if user is not None and user.count:
            logs = user.logs
            row[9] = logs[-1]
            row[10] = math.log1p(_mean(math.expm1(v) for v in logs[-2:]))
            row[11] = _mean(logs)
            row[12] = _mean(user.ratios)
            row[13] = math.log1p(user.count)
            row[14] = _mean(user.failed)
            row[15] = 1.0 if user.last_request == requested else 0.0
        if named is not None and named.count:
            row[16] = named.logs[-1]
            row[17] = _mean(named.logs)
        if acct is not None:
            row[18], row[19] = acct
        if shape is not None and shape.count:
            row[20] = shape.logs[-1]
            row[21] = _mean(shape.logs)
            row[22] = math.log1p(shape.count)
        return row

    def codes(self) -> list[tuple[int, str, int]]:
        """The categorical codes given so far, as (kind, value, code): saved with a model,
        which splits on them."""
        return [(kind, value, code) for (kind, value), code in self._codes.items()]

    def restore_codes(self, saved: Sequence[Sequence[Any]]) -> None:
        """Number values as ``saved`` (from ``codes``) did: a loaded model meets the codes
        it was trained with, whatever order the values are seen in now. Values numbered
        here and not saved keep a code, after the saved ones."""
        codes = {(int(kind), str(value)): int(code) for kind, value, code in saved}
        top = max(codes.values(), default=-1)
        for key in self._codes:
            if key not in codes:
                top += 1
                codes[key] = top
        self._codes = codes
        self._next_code = top + 1

    def freeze_accounts(self) -> None:
        """Accounts' recent history as features will read it until the next call."""
        self._frozen = {
            name: (_mean(recent.logs), _mean(recent.ratios))
            for name, recent in self._accounts.items()
            if recent.count
        }

    def add(self, job: Job, runtime_s: float) -> None:
        spec = job.spec
        requested = requested_s(job)
        log_run = math.log1p(max(runtime_s, 0.0))
        ratio = min(max(runtime_s, 0.0) / requested, 1.0)
        failed = job.state in _FAILED
        for recent in (
            _entry(self._users, spec.user, 8),
            _entry(self._accounts, spec.account or "", 8),
        ):
            recent.add(log_run, ratio, failed, requested)
        # (of a job name and a shape only the run times are read)
        _runs(self._names, (spec.user, spec.name), 4).add_run(log_run)
        cpus = spec.ntasks * spec.cpus_per_task
        _runs(self._shapes, (spec.user, requested, cpus), 4).add_run(log_run)
        self.version[spec.user] = self.version.get(spec.user, 0) + 1
