"""The agent's Prometheus endpoint: ``GET /metrics`` on a small listener of its own.

Off unless configured (``AgentConfig.metrics_listen``, from ``HAL_AGENT_METRICS_LISTEN``:
``PORT``, ``:PORT`` or ``HOST:PORT``), because several agents may share a host (``hal
up``, tests) and a fixed default port would collide. The control plane already exports
what it knows about every node (allocations, heartbeat age, registrations); this is the
node's own view, worth scraping when the control plane's is in doubt:

==========================================  =======  ===============================
``hal_build_info``                          gauge    ``version``, ``python``, ``service``
``hal_agent_jobs``                          gauge    ``node``, ``phase`` (launching,
                                                     running, stopping)
``hal_agent_cpus``                          gauge    ``node``, ``state`` (alloc, idle)
``hal_agent_memory_bytes``                  gauge    ``node``, ``state``
``hal_agent_gpus``                          gauge    ``node``, ``state``
``hal_agent_job_launches_total``            counter  ``node``, ``result`` (started, failed)
``hal_agent_jobs_finished_total``           counter  ``node``, ``state`` (completed, failed,
                                                     timeout, oom, cancelled ...)
``hal_agent_registrations_total``           counter  ``node``
``hal_agent_channel_failures_total``        counter  ``node``: requests to the server that
                                                     failed (unreachable, 5xx, 404)
``hal_agent_channel_reconnects_total``      counter  ``node``: syncs that succeeded after
                                                     a failure
``hal_agent_artifact_fetches_total``        counter  ``node``: artifacts fetched (docs/
                                                     user/artifacts.md); a copy here is none
``hal_agent_artifact_fetched_bytes_total``  counter  ``node``
``hal_agent_artifact_tree_fetches_total``   counter  ``node``: of those, read at the node's
                                                     leaf cache (the cache tree)
``hal_agent_artifact_tree_refused_total``   counter  ``node``: pieces the tree gave with
                                                     other bytes than their sha256's
``hal_agent_artifact_tree_fallbacks_total`` counter  ``node``: fetched from the server
                                                     after the tree failed
``hal_agent_python_env_builds_total``       counter  ``node``, ``result`` (built, failed):
                                                     Python environments built here
                                                     (docs/user/environments.md)
``hal_agent_container_image_loads_total``   counter  ``node``: images loaded into podman
                                                     here (--container; one already
                                                     loaded is none)
``hal_agent_last_sync_timestamp_seconds``   gauge    ``node``
``hal_agent_gpu_utilization_percent``       gauge    ``node``, ``gpu``: the percent of NVML's
                                                     last sample period a kernel ran
``hal_agent_gpu_memory_bytes``              gauge    ``node``, ``gpu``, ``state`` (used,
                                                     total): any process's, the driver's
``hal_agent_gpu_problems``                  gauge    ``node``: problems at the last GPU
                                                     health read (``gpuhealth``); 0 healthy
``process_*``                                        the agent process (prometheus-client)
==========================================  =======  ===============================

Everything is read on the event loop: the listener is an asyncio server on the agent's
own loop, so a scrape never sees the state machine mid-step. The GPU families are there
on a node whose GPUs NVML found (read at the scrape, a few NVML calls per GPU). Counters
count from the agent process's start.
"""

from __future__ import annotations

import logging
import platform
from collections import Counter as Tally
from collections.abc import Callable, Iterable

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hal import __version__
from hal.agent.artifacts import ArtifactCache
from hal.agent.containers import Containers
from hal.agent.counters import AgentCounters, Capacity
from hal.agent.gpuusage import DeviceGpu
from hal.agent.pyenvs import PythonEnvs
from hal.agent.records import JobRecord, Phase

__all__ = ["AgentCollector", "AgentCounters", "Capacity", "agent_registry"]

log = logging.getLogger("hal.agent.metrics")


class AgentCollector(Collector):
    def __init__(
        self,
        node: str,
        counters: AgentCounters,
        jobs: Callable[[], Iterable[JobRecord]],
        capacity: Capacity,
        gpus: Callable[[], list[DeviceGpu]] = list,
        gpu_problems: Callable[[], list[str] | None] = lambda: None,
        artifacts: ArtifactCache | None = None,
        pyenvs: PythonEnvs | None = None,
        containers: Containers | None = None,
    ) -> None:
        self.artifacts = artifacts
        self.pyenvs = pyenvs
        self.containers = containers
        self.node = node
        self.counters = counters
        self.jobs = jobs
        self.capacity = capacity
        self.gpus = gpus
        self.gpu_problems = gpu_problems

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: families are known at collect time

    def collect(self) -> Iterable[Metric]:
        node, c = self.node, self.counters
        info = GaugeMetricFamily(
            "hal_build_info", "HAL version (value 1).", labels=["version", "python", "service"]
        )
        info.add_metric([__version__, platform.python_version(), "hal-agent"], 1)
        yield info
        phases: Tally[str] = Tally()
        cpus = memory = gpus = 0
        for job in self.jobs():
            phases[job.phase.value.lower()] += 1
            cpus, memory, gpus = cpus + job.cpus, memory + job.memory_bytes, gpus + job.gpus
        jobs = GaugeMetricFamily(
            "hal_agent_jobs", "Jobs this agent supervises, by phase.", labels=["node", "phase"]
        )
        for phase in Phase:
            jobs.add_metric([node, phase.value.lower()], phases.get(phase.value.lower(), 0))
        yield jobs
        total = self.capacity
        for name, unit_help, used, offered in (
            ("hal_agent_cpus", "CPUs", cpus, total.cpus),
            ("hal_agent_memory_bytes", "Memory", memory, total.memory_bytes),
            ("hal_agent_gpus", "GPUs", gpus, total.gpus),
        ):
            family = GaugeMetricFamily(
                name,
                f"{unit_help} this node offers, allocated to its jobs or idle.",
                labels=["node", "state"],
            )
            family.add_metric([node, "alloc"], used)
            family.add_metric([node, "idle"], max(0, offered - used))
            yield family
        launches = CounterMetricFamily(
            "hal_agent_job_launches",
            "Launches by result: started (the job's process runs) or failed.",
            labels=["node", "result"],
        )
        for result in ("started", "failed"):
            launches.add_metric([node, result], c.launches.get(result, 0))
        yield launches
        finished = CounterMetricFamily(
            "hal_agent_jobs_finished",
            "Jobs that ended on this node, by final state.",
            labels=["node", "state"],
        )
        for state, n in sorted(c.finished.items()):
            finished.add_metric([node, state], n)
        yield finished
        for name, text, value in (
            ("hal_agent_registrations", "Registrations with the control plane.", c.registrations),
            (
                "hal_agent_channel_failures",
                "Requests to the control plane that failed (unreachable, 5xx, 404).",
                c.channel_failures,
            ),
            (
                "hal_agent_channel_reconnects",
                "Syncs that succeeded after the channel had failed.",
                c.reconnects,
            ),
            (
                "hal_agent_artifact_fetches",
                "Artifacts fetched, from the server or the cache tree (a copy here is none).",
                self.artifacts.fetches if self.artifacts else 0,
            ),
            (
                "hal_agent_artifact_fetched_bytes",
                "Bytes of artifacts fetched from the control plane or the cache tree.",
                self.artifacts.fetched_bytes if self.artifacts else 0,
            ),
            (
                "hal_agent_artifact_tree_fetches",
                "Artifacts read at this node's leaf cache (the cache tree).",
                self.artifacts.tree.fetches if self.artifacts else 0,
            ),
            (
                "hal_agent_artifact_tree_refused",
                "Pieces the cache tree gave with other bytes than their sha256's (refused).",
                self.artifacts.tree.refused if self.artifacts else 0,
            ),
            (
                "hal_agent_artifact_tree_fallbacks",
                "Artifacts fetched from the server after the cache tree failed.",
                self.artifacts.tree.fallbacks if self.artifacts else 0,
            ),
            (
                "hal_agent_container_image_loads",
                "Container images loaded into podman here (one already loaded is none).",
                self.containers.loads if self.containers else 0,
            ),
        ):
            counter = CounterMetricFamily(name, text, labels=["node"])
            counter.add_metric([node], value)
            yield counter
        builds = CounterMetricFamily(
            "hal_agent_python_env_builds",
            "Python environments built here (one reused is none), by result.",
            labels=["node", "result"],
        )
        envs = self.pyenvs
        builds.add_metric([node, "built"], envs.builds if envs else 0)
        builds.add_metric([node, "failed"], envs.failures if envs else 0)
        yield builds
        last = GaugeMetricFamily(
            "hal_agent_last_sync_timestamp_seconds",
            "When a sync with the control plane last succeeded (0: never).",
            labels=["node"],
        )
        last.add_metric([node], c.last_sync)
        yield last
        yield from self._gpu_families()

    def _gpu_families(self) -> Iterable[Metric]:
        node, devices = self.node, self.gpus()
        if devices:
            util = GaugeMetricFamily(
                "hal_agent_gpu_utilization_percent",
                "Percent of NVML's last sample period in which a kernel ran on the GPU.",
                labels=["node", "gpu"],
            )
            memory = GaugeMetricFamily(
                "hal_agent_gpu_memory_bytes",
                "GPU memory in use (any process's and the driver's) and in all.",
                labels=["node", "gpu", "state"],
            )
            for d in devices:
                util.add_metric([node, str(d.index)], d.util)
                memory.add_metric([node, str(d.index), "used"], d.mem_used_bytes)
                memory.add_metric([node, str(d.index), "total"], d.mem_total_bytes)
            yield util
            yield memory
        problems = self.gpu_problems()
        if problems is not None:
            health = GaugeMetricFamily(
                "hal_agent_gpu_problems",
                "GPU problems at the last health read (a lost GPU, uncorrectable ECC "
                "errors, a pending row remap); 0 = healthy. The node is drained meanwhile.",
                labels=["node"],
            )
            health.add_metric([node], len(problems))
            yield health


def agent_registry(collector: AgentCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    prometheus_client.ProcessCollector(registry=registry)
    return registry
