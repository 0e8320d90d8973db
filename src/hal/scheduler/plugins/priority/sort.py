"""Order the queue: higher ``job.priority`` first, then earlier ``submit_time``.

Priority itself is computed elsewhere (the server: basic at submit, or multifactor with
fair share, see ``hal.api.priority``); this plugin only reads it. The runtime appends
``job.id`` to the key, so equal priority and submit time fall back to submission order
of ids.
"""

from __future__ import annotations

from hal.core.job import Job
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args

NAME = "priority"


class PrioritySort:
    name = NAME

    def sort_key(self, job: Job) -> tuple[int, float]:
        return (-job.priority, job.submit_time)


def new(args: PluginArgs) -> PrioritySort:
    reject_unknown_args(args, ())
    return PrioritySort()
