"""Guards the agent's public surface: a change here is a change for its users."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import hal.agent
from hal.agent import AgentConfig, run_agent


def test_exported_names() -> None:
    assert sorted(hal.agent.__all__) == [
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


def test_config_fields() -> None:
    assert [f.name for f in dataclasses.fields(AgentConfig)] == [
        "server_url",
        "token",
        "node",
        "cpus",
        "memory_bytes",
        "gpus",
        "features",
        "address",
        "state_dir",
        "isolation",
        "constrain_devices",
        "bind_cpus",
        "constrain_cores",
        "heartbeat_interval_seconds",
        "gpu_health_interval_seconds",
        "max_backoff_seconds",
        "validate",
        "metrics_listen",
        "gpu_model",
        "gpu_islands",
        "topology_labels",
        "nvlink_domain",
        "unknown_users_as_agent",
        "artifact_cache_bytes",
        "traffic_interval_seconds",
        "interruption_notice",
        "interruption_interval_seconds",
    ]


def test_run_agent_signature() -> None:
    params = inspect.signature(run_agent).parameters
    assert list(params) == ["config", "stop", "channel"]
    assert params["channel"].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.iscoroutinefunction(run_agent)


def test_agent_imports_no_server_module() -> None:
    """The layer rule, checked in a fresh interpreter (this one may have them loaded)."""
    code = (
        "import sys, hal.agent.shell; "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('hal.api', 'hal.state', 'hal.scheduler'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
