"""Who a node's reason names: the operator who set it, or the server for its own.

Slurm records with each reason the user who set it and when (``sinfo -R``, ``scontrol
show node``'s ``Reason=... [root@2026-11-26T06:30:00]``); for the reasons slurmctld writes
itself ("Not responding") that user is its ``SlurmUser``. HAL's equivalent is the account
the server runs as: a node that stopped answering, the GPU health check's drain and the
anomaly detector's carry its name, and ``scontrol show config`` shows it as ``SlurmUser``.
"""

from __future__ import annotations

import os
import pwd
from functools import cache

from hal.core.node import Node
from hal.core.states import NodeState

NOT_RESPONDING = "Not responding"


def set_down_by_operator(node: Node) -> bool:
    """DOWN by an operator's ``scontrol update State=DOWN`` (it outlives the agent's
    restart), not by the server's timeout. (Older servers stored such a reason
    as ``admin: REASON``; those read the same.)"""
    return node.state is NodeState.DOWN and node.reason != NOT_RESPONDING


@cache
def server_user() -> str:
    """The server's account name; ``hal`` where the account has none (a container's
    uid without a passwd entry)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return "hal"
