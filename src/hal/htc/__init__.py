"""High-throughput sessions (Symphony-style): many short tasks on warm service workers.

Owns: the broker process (``broker``, ``brokerd``), its session and task bookkeeping
(``session``, ``tasks``), worker-pool planning and fair sharing (``pool``,
``fairshare``), the worker (``worker``, ``keeper``, ``service``), the wire protocol (``protocol``),
the REST schemas (``rest``), durable session records (``records``) and the client API
(``client``, ``client_session``, ``futures``, ``sigterm``). See README.md in this
folder.

Must not import ``hal.state``, ``hal.scheduler`` or ``hal.api``: the broker reaches the
control plane only over HTTP (``controlplane.ControlPlane``) and workers are HAL jobs.

    from hal import htc
    with htc.HtcClient() as hal, hal.open_session("hal.htc.examples:square") as s:
        print(list(s.map(range(10))))
"""

from hal.htc.client import HtcClient
from hal.htc.client_session import Session
from hal.htc.errors import PoisonTask, SessionEnded, TaskError, TaskFailed, TaskTimedOut
from hal.htc.futures import TaskFuture, TaskResult, as_completed
from hal.htc.service import common
from hal.htc.sigterm import Terminated

__all__ = [
    "HtcClient",
    "PoisonTask",
    "Session",
    "SessionEnded",
    "TaskError",
    "TaskFailed",
    "TaskFuture",
    "TaskResult",
    "TaskTimedOut",
    "Terminated",
    "as_completed",
    "common",
]
