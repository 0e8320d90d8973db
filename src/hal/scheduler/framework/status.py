"""``Status``: every expected scheduling outcome is a value, never an exception.

A plugin answers each call with a ``Status``. ``SUCCESS`` lets the job go on; every other
code stops the job's cycle at that point (except ``SKIP``, see below) and the Status's
``reason`` becomes the job's Slurm pending reason. A plugin that *raises* has a bug: the
runtime catches it, turns it into ``ERROR`` for that one job and goes on with the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hal.core.states import JobState, PendingReason


class Code(StrEnum):
    SUCCESS = "Success"
    # Does not fit now; may fit later when something changes (resources free up, the
    # dependency finishes, the hold is released). The job stays pending with ``reason``.
    UNSCHEDULABLE = "Unschedulable"
    # Cannot fit whatever the rest of the cluster does (asks for more than any node has,
    # an unknown feature, a dependency that can never be met). Preemption would not help.
    UNRESOLVABLE = "Unresolvable"
    # Permit only: hold the job (e.g. until the rest of its gang is placed).
    WAIT = "Wait"
    # PreFilter/PreScore only: this plugin has nothing to say about the job, so its
    # Filter/Score is not called for it.
    SKIP = "Skip"
    # A plugin raised or returned an impossible value. Only this job's cycle fails.
    ERROR = "Error"


# Plain constants: ``Code.SUCCESS`` is a lookup through the enum class (about 80 ns on
# Python 3.11), and these properties run for every job of every pass.
_SUCCESS = Code.SUCCESS
_GOING_ON = (Code.SUCCESS, Code.SKIP)


@dataclass(frozen=True, slots=True)
class Status:
    """The outcome of one plugin call, or of a whole job cycle.

    ``terminal_state`` is set only when the job should be ended without running (e.g. an
    unsatisfiable dependency with ``--kill-on-invalid-dep``); the scheduler turns it into
    a ``Termination`` in the plan. ``earliest_start``: a rejection that knows the job
    cannot start before some instant (``--begin``, its reservation's window) says so;
    the pass gives it as the job's expected start when backfill has none.
    """

    code: Code = Code.SUCCESS
    reason: PendingReason = PendingReason.NONE
    message: str = ""
    plugin: str = ""
    terminal_state: JobState | None = None
    earliest_start: float | None = None

    @property
    def is_success(self) -> bool:
        return self.code is _SUCCESS

    @property
    def is_rejection(self) -> bool:
        """True for the codes that stop the cycle (everything but SUCCESS and SKIP)."""
        return self.code not in _GOING_ON

    def with_plugin(self, plugin: str) -> Status:
        if self.plugin == plugin:
            return self
        return Status(
            self.code, self.reason, self.message, plugin, self.terminal_state, self.earliest_start
        )


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def unschedulable(
    reason: PendingReason,
    message: str = "",
    plugin: str = "",
    *,
    earliest_start: float | None = None,
) -> Status:
    return Status(Code.UNSCHEDULABLE, reason, message, plugin, earliest_start=earliest_start)


def unresolvable(reason: PendingReason, message: str = "", plugin: str = "") -> Status:
    return Status(Code.UNRESOLVABLE, reason, message, plugin)


def error(message: str, plugin: str = "") -> Status:
    # A crashed job keeps waiting: WaitingForScheduling tells the user the scheduler has
    # not reached a verdict, which is the truth, and an operator finds the message in the
    # pass diagnostics.
    return Status(Code.ERROR, PendingReason.WAITING_FOR_SCHEDULING, message, plugin)
