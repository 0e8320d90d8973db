"""``AgentConfig``: what an agent needs to know to serve one node."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from hal.client.config import default_server_url

METRICS_ENV = "HAL_AGENT_METRICS_LISTEN"


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/hal/agent")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hal" / "agent"


def host_cpus() -> int:
    """CPUs this process may use (respects a cpuset/affinity mask, unlike cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def host_memory_bytes() -> int:
    import psutil  # here: an agent given --memory (every test's) never reads it

    return int(psutil.virtual_memory().total)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Settings of one node agent. ``None`` means "discover it on this host"."""

    server_url: str = field(default_factory=default_server_url)
    token: str | None = None  # None: HAL_TOKEN or the stored credentials for server_url
    node: str = field(default_factory=short_hostname)
    cpus: int | None = None  # default: the CPUs this process may run on
    memory_bytes: int | None = None  # default: the host's physical memory
    gpus: int | None = None  # default: what NVML finds (0 without it)
    features: tuple[str, ...] = ()
    address: str = ""  # how the server may reach this node, if it ever needs to
    state_dir: Path = field(default_factory=default_state_dir)
    isolation: str = "auto"  # auto | cgroup2 | cgroup1 | rlimit | none
    # GPU device isolation (hal.agent.devices), Slurm's ConstrainDevices: auto | yes | no
    constrain_devices: str = "auto"
    # jobs bound to their own CPUs of the host (hal.agent.cpus): auto | yes | no
    bind_cpus: str = "auto"
    # bound jobs fenced to their CPUs by the cpuset controller (hal.agent.cpusets),
    # Slurm's ConstrainCores: auto | yes | no
    constrain_cores: str = "auto"
    heartbeat_interval_seconds: float = 10.0  # the long poll's length (each sync is a beat)
    # how often the GPUs' health is read (hal.agent.gpuhealth); 0 = never
    gpu_health_interval_seconds: float = 60.0
    max_backoff_seconds: float = 30.0  # cap of the retry delay while the server is away
    validate: bool = False  # check the state machine's whole state after every step
    # Prometheus /metrics of this agent (hal.agent.metrics): PORT, :PORT or HOST:PORT;
    # "" = off (the default: agents sharing a host would collide on a fixed port).
    metrics_listen: str = field(default_factory=lambda: os.environ.get(METRICS_ENV, ""))
    # the GPUs' model as jobs name their type (--gres=gpu:TYPE:N), e.g. "nvidia_a100";
    # "": NVML's (a [cloud] group's nodes are told their group's gpu_type)
    gpu_model: str = ""
    # NVLink islands, e.g. ((0, 1, 2, 3), (4, 5, 6, 7)); None: NVML's (one island without)
    gpu_islands: tuple[tuple[int, ...], ...] | None = None
    # rack/zone/region/site (--topology-label rack=r1) and a multi-node NVLink domain
    topology_labels: tuple[tuple[str, str], ...] = ()
    nvlink_domain: str = ""
    # Run the jobs of users without a Unix account on the control plane's host (a launch
    # without a uid) as this agent's user. Off, a root agent refuses them: they would run
    # as root (hal.agent.plan.resolve_user).
    unknown_users_as_agent: bool = False
    # the node's copies of artifacts (docs/user/artifacts.md) are removed, least recently used
    # first and never while a job here holds them, when they take more than this
    artifact_cache_bytes: int = 10 * 1024**3
    # how often the running jobs' TCP traffic is read for the long poll (hal.agent.traffic,
    # AgentSync.traffic); 0 = never
    traffic_interval_seconds: float = 10.0
    # the instance metadata service read for the provider's interruption notices
    # (hal.agent.interruption), e.g. http://169.254.169.254 on EC2; "" = none (the default)
    interruption_notice: str = ""
    interruption_interval_seconds: float = 5.0  # how often it is read
