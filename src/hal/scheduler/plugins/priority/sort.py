"""Order the queue: higher ``job.priority`` first, then earlier ``submit_time``.

Priority itself is computed elsewhere (the server: basic at submit, or multifactor with
fair share, see ``hal.server.priority``); this plugin only reads it. The runtime appends
``job.id`` to the key, so equal priority and submit time fall back to submission order
of ids.

A job that had running jobs preempted for it (``PREEMPTING`` in its ``extra``, set by
the server) comes before every other: what its victims free must go to it, not back to
them. With preemption on, a ``rank`` (the job's standing for preemption: its QoS's priority,
or its partition's tier) comes first: a job is never tried after a job it may preempt,
so it cannot be held behind it, and a requeued victim cannot take back the nodes it was
preempted for before its preemptor starts.
"""

from __future__ import annotations

from collections.abc import Callable

from hal.core.job import Job
from hal.core.preemption import PREEMPTING
from hal.scheduler.framework.interfaces import QueueSortPlugin
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args

NAME = "priority"
Rank = Callable[[Job], int]


class PrioritySort:
    name = NAME

    def __init__(self, rank: Rank | None = None) -> None:
        self.rank = rank

    def sort_key(self, job: Job) -> tuple[float, ...]:
        # a job that had others preempted for it goes first (False sorts before True)
        waiting = PREEMPTING not in job.extra
        if self.rank is None:
            return (waiting, -job.priority, job.submit_time)
        return (waiting, -self.rank(job), -job.priority, job.submit_time)


def new(args: PluginArgs, rank: Rank | None = None) -> PrioritySort:
    reject_unknown_args(args, ())
    return PrioritySort(rank)


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_QUEUE_SORT: type[QueueSortPlugin] = PrioritySort
