"""The node agent: launches and supervises job processes on one node.

Owns ``AgentState`` (a sans-IO state machine: events in, commands out, for batch jobs
and, in its step half, this node's parts of job steps), the asyncio shells that connect
it to processes, files and the network, the step launcher and what it forks (a step
supervisor per job, a step keeper per step part: they survive agent restarts and record
the exact exit status), isolation backends (cgroup v2, cgroup v1, rlimit), GPU discovery
and the Slurm conventions of a job's environment and output files. See README.md in
this folder.

Reaches the control plane only over the network (``hal.wire`` models through an
``AgentChannel``); imports ``hal.core``, ``hal.wire`` and ``hal.client`` only — never
``hal.api``, ``hal.state`` or ``hal.scheduler``.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hal.agent.channel import (
        AgentChannel,
        AgentChannelError,
        ChannelUnavailable,
        CredentialRefused,
        HttpAgentChannel,
        NodeForgotten,
    )
    from hal.agent.config import AgentConfig
    from hal.agent.records import InvariantViolation
    from hal.agent.shell import AgentShell, run_agent
    from hal.agent.state import AgentState

# Imported on first use: the step launcher (``hal.agent.forkserver``) is a small process
# whose forks must stay cheap, so importing this package must not pull in httpx/pydantic.
_EXPORTS = {
    "AgentChannel": "hal.agent.channel",
    "AgentChannelError": "hal.agent.channel",
    "ChannelUnavailable": "hal.agent.channel",
    "CredentialRefused": "hal.agent.channel",
    "HttpAgentChannel": "hal.agent.channel",
    "NodeForgotten": "hal.agent.channel",
    "AgentConfig": "hal.agent.config",
    "AgentShell": "hal.agent.shell",
    "run_agent": "hal.agent.shell",
    "AgentState": "hal.agent.state",
    "InvariantViolation": "hal.agent.records",
}

__all__ = [
    "AgentChannel",
    "AgentChannelError",
    "AgentConfig",
    "AgentShell",
    "AgentState",
    "ChannelUnavailable",
    "CredentialRefused",
    "HttpAgentChannel",
    "InvariantViolation",
    "NodeForgotten",
    "run_agent",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hal.agent' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
