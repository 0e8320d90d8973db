"""Errors a task or a session reports to the client.

    TaskError                 a task did not produce a result
      TaskFailed              the service raised (message: the exception, as text)
      TaskTimedOut            it ran past the session's task timeout
      PoisonTask              it kept killing the workers that ran it
    SessionEnded              the session ended (cancelled, failed, lost) with tasks open

Task errors are values delivered through futures and ``map``; they are not ``HalError``s
(the server is fine, the user's code is not). ``SessionEnded`` is, with code ``conflict``.
"""

from __future__ import annotations

from typing import Any

from hal.core.errors import Conflict
from hal.htc import protocol as p


class TaskError(Exception):
    def __init__(self, task_id: int, message: str) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.message = message


class TaskFailed(TaskError):
    pass


class TaskTimedOut(TaskError):
    pass


class PoisonTask(TaskError):
    pass


class SessionEnded(Conflict):
    def __init__(self, state: str, reason: str) -> None:
        super().__init__(f"the session ended {state}" + (f": {reason}" if reason else ""))
        self.state = state
        self.reason = reason


def error_for(task_id: int, status: int, detail: Any) -> TaskError:
    text = str(detail)
    if status == p.TIMED_OUT:
        return TaskTimedOut(task_id, text)
    if status == p.POISON:
        return PoisonTask(task_id, text)
    return TaskFailed(task_id, text)
