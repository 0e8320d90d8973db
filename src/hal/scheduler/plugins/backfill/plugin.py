"""``Backfill``: the policy half of backfilling (which partitions, EASY or conservative,
Slurm's tunables, whose run-time predictions). The planning itself is the framework's
backfill stage (``hal.scheduler.framework.backfill``), so every backfilled job goes
through the same cycle as a main-pass job.

Run times come from a ``hal.predict.Predictor`` (``user``: the requested time, ``avg2``
or ``learned``; the server passes its own shared, trained one), clamped to the job's time
limit. A prediction never kills anyone: jobs end at their own
time limit; the prediction only moves planned starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial

import numpy as np
import numpy.typing as npt

from hal.core.job import Job
from hal.predict import (
    CONFIGURABLE,
    BatchPredictor,
    Predictor,
    SharedPredictor,
    UserPredictor,
    make_predictor,
    planned_runtime,
)
from hal.scheduler.framework.interfaces import BackfillMode, BackfillPlugin, BackfillPolicy
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args

NAME = "backfill"
ARGS = (
    "mode",
    "partitions",
    "window_s",
    "resolution_s",
    "max_job_test",
    "interval_s",
    "yield_interval_s",
    "order",
    "predictor",
    "protect_after_s",
)
ORDERS = ("priority", "shortest")
NO_BACKFILL = "none"  # a partition listed with this mode stays strictly in priority order
# Predictions kept by job, in two generations of this many: a full one becomes the one
# before, whose jobs move up to the new one when asked again, and what it still holds is
# let go when the new one fills in turn. So the jobs asked every pass (the backfill stage
# asks each running job: 77,000 at 10,000 nodes of the scale bench's mix) keep theirs
# while there are no more than this many, however many others come and go; a single
# dictionary cleared when full had each pass work them all out again.
_FIXED_KEPT = 131_072


class Backfill:
    name = NAME

    def __init__(
        self,
        default: BackfillPolicy | None,
        per_partition: Mapping[str, BackfillPolicy | None] | None = None,
        predictor: Predictor | None = None,
    ) -> None:
        self.default = default
        self.per_partition = dict(per_partition or {})
        self.predictor: Predictor = predictor or UserPredictor()
        # Resolved once (the predictor is not replaced): isinstance against a
        # runtime-checkable Protocol costs about 100 us, and it was asked every pass.
        self._batch = self.predictor if isinstance(self.predictor, BatchPredictor) else None
        # the server's shared predictor corrects with the model's own rule (``learned``)
        self._planned: Callable[[Job, float], float] = (
            self.predictor.planned
            if isinstance(self.predictor, SharedPredictor)
            else partial(planned_runtime, self.predictor)
        )
        # The user predictor's planned run time depends on the job's time limit alone:
        # job id → (the limit, its planned run time from the start), for it only (the
        # others learn). No ``Job`` is held: an ended job's spec (script, environment)
        # is not kept alive by its entry.
        self._fixed: dict[int, tuple[int, float]] | None = (
            {} if type(self.predictor) is UserPredictor else None
        )
        self._fixed_before: dict[int, tuple[int, float]] = {}  # (``_FIXED_KEPT``)

    @property
    def interval_s(self) -> float:
        return self._least(lambda p: p.interval_s)

    @property
    def yield_interval_s(self) -> float:
        return self._least(lambda p: p.yield_interval_s)

    def _least(self, setting: Callable[[BackfillPolicy], float]) -> float:
        """The smallest ``setting`` of the policies (0 where no partition backfills)."""
        policies = [self.default, *self.per_partition.values()]
        return min((setting(p) for p in policies if p is not None), default=0.0)

    def policy_for(self, partition: str) -> BackfillPolicy | None:
        if partition in self.per_partition:
            return self.per_partition[partition]
        return self.default

    def planning(self) -> AbstractContextManager[object]:
        # the server's shared predictor (the prediction service observes ends and trains
        # with it): held for the stage. Asked job by job, each call took its lock again,
        # and a job ended meanwhile made every prediction of its user's jobs stale, each
        # then predicted alone (on the live server, a fifth of backfill's turn)
        if isinstance(self.predictor, SharedPredictor):
            return self.predictor.lock
        return nullcontext()

    # -- a pass decided in a forked process (``hal.scheduler.forked``): the shared
    # predictor's lock is held across the fork (its trainer may hold it), and the
    # running jobs' predictions a pass pins travel back to the server's predictor

    def fork_lock(self) -> AbstractContextManager[object]:
        return self.planning()

    def carried_state(self) -> SharedPredictor | None:
        return self.predictor if isinstance(self.predictor, SharedPredictor) else None

    def prepare(self, jobs: Sequence[Job]) -> None:
        if self._batch is not None:
            self._batch.prepare(jobs)

    def runtime(self, job: Job, elapsed_s: float = 0.0) -> float:
        fixed = self._fixed
        if fixed is None:
            return self._planned(job, elapsed_s)
        limit = job.time_limit_s
        found = fixed.get(job.id)
        if found is None or found[0] != limit:
            found = self._fixed_before.get(job.id)
            if found is None or found[0] != limit:
                found = (limit, planned_runtime(self.predictor, job))
            if len(fixed) >= _FIXED_KEPT:
                self._fixed_before, fixed = fixed, {}
                self._fixed = fixed
            fixed[job.id] = found
        if elapsed_s < found[1]:
            # not outlived (the time limit, at least 1 s): nothing to correct
            return found[1]
        return self._planned(job, elapsed_s)

    def fixed_runtimes(self, jobs: Sequence[Job]) -> npt.NDArray[np.float64] | None:
        """``runtime(job)`` of each of ``jobs``, none of them started, when it is the same
        whenever and in whatever order it is asked (the requested time); None otherwise
        (a predictor that learns, or remembers what it was asked)."""
        if self._fixed is None:
            return None
        assert isinstance(self.predictor, UserPredictor)  # (what ``_fixed`` is kept for)
        return self.predictor.planned_all(jobs)


def _number(args: PluginArgs, key: str, default: float, *, integer: bool = False) -> float:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PluginArgsError(key, f"must be a non-negative number, not {value!r}")
    if not math.isfinite(value):  # (NaN passes ``< 0``; it made every forecast slice one
        # job long, inf bf_interval never due)
        raise PluginArgsError(key, f"must be a finite non-negative number, not {value!r}")
    if integer and int(value) != value:
        raise PluginArgsError(key, f"must be a whole number, not {value!r}")
    return float(value)


def _mode(key: str, value: object) -> BackfillMode | None:
    if value == NO_BACKFILL:
        return None
    try:
        return BackfillMode(str(value))
    except ValueError:
        allowed = ", ".join([*(m.value for m in BackfillMode), NO_BACKFILL])
        raise PluginArgsError(key, f"must be one of {allowed}, not {value!r}") from None


def new(args: PluginArgs, predictor: Predictor | None = None) -> Backfill:
    """From the profile's ``plugin_args.backfill``::

    mode = "easy"            # or "conservative", or "none"; the default for partitions
    partitions = {debug = "none", long = "conservative"}   # per-partition modes
    window_s = 86400         # bf_window (0 = unlimited)
    resolution_s = 60        # bf_resolution
    max_job_test = 500       # bf_max_job_test per partition (0 = all)
    interval_s = 30          # bf_interval
    yield_interval_s = 0.5   # bf_yield_interval: the forecast of expected starts in
                             # slices of this long, one per cycle (0 = whole)
    order = "priority"       # or "shortest": shortest predicted job backfilled first
    protect_after_s = 86400  # once a partition's first waiting job has waited this long,
                             # jobs backfilled before it are planned to their time limit
                             # (no prediction can delay it further); 0 = never
    predictor = "user"       # or "avg2" or "learned": built here unless the caller
                             # passes ``predictor`` (the server its shared one, whose
                             # name must then match; a simulator e.g. ``perfect``)
    """
    reject_unknown_args(args, ARGS)
    order = args.get("order", "priority")
    if order not in ORDERS:
        raise PluginArgsError("order", f"must be one of {', '.join(ORDERS)}, not {order!r}")
    name = args.get("predictor", "user")
    if name not in CONFIGURABLE:
        raise PluginArgsError(
            "predictor", f"must be one of {', '.join(CONFIGURABLE)}, not {name!r}"
        )
    if predictor is None:
        predictor = make_predictor(str(name))
    elif "predictor" in args and predictor.name != name:
        raise PluginArgsError(
            "predictor", f"names {name!r} but the server plans with {predictor.name!r}"
        )
    base = {
        "window_s": _number(args, "window_s", 86_400.0),
        "resolution_s": _number(args, "resolution_s", 60.0),
        "max_job_test": int(_number(args, "max_job_test", 500, integer=True)),
        "interval_s": _number(args, "interval_s", 30.0),
        "yield_interval_s": _number(args, "yield_interval_s", 0.5),
        "shortest_first": order == "shortest",
        "protect_after_s": _number(args, "protect_after_s", 86_400.0),
    }

    def policy(key: str, value: object) -> BackfillPolicy | None:
        mode = _mode(key, value)
        return None if mode is None else BackfillPolicy(mode=mode, **base)  # type: ignore[arg-type]

    default = policy("mode", args.get("mode", BackfillMode.EASY.value))
    parts = args.get("partitions", {})
    if not isinstance(parts, Mapping):
        raise PluginArgsError("partitions", "must be a table of partition = mode")
    per_partition = {str(p): policy(f"partitions.{p}", m) for p, m in parts.items()}
    return Backfill(default, per_partition, predictor)


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_BACKFILL: type[BackfillPlugin] = Backfill
