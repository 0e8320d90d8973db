"""What the agent counts as it runs and the capacity it registers with: plain numbers the
shell keeps whether or not anyone scrapes them. ``hal.agent.metrics`` turns them into
Prometheus families, and imports prometheus-client, only when the agent serves
``/metrics`` (``AgentConfig.metrics_listen``)."""

from __future__ import annotations

from collections import Counter as Tally
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hal.wire.agent import JobReport


@dataclass(slots=True)
class AgentCounters:
    """What the shell counts as it happens (plain integers: cheap when nobody scrapes)."""

    launches: Tally[str] = field(default_factory=Tally)  # started / failed
    finished: Tally[str] = field(default_factory=Tally)  # by final state label
    registrations: int = 0
    channel_failures: int = 0
    reconnects: int = 0
    last_sync: float = 0.0

    def on_report(self, report: JobReport) -> None:
        """Each report is made once (resends reuse it), so each job counts once."""
        if report.kind == "started":
            self.launches["started"] += 1
        elif report.kind == "launch_failed":
            self.launches["failed"] += 1
        elif report.state:
            state = report.state.lower()
            self.finished["oom" if state == "out_of_memory" else state] += 1


@dataclass(frozen=True, slots=True)
class Capacity:
    """What this node offers the cluster (the numbers it registers with)."""

    cpus: int
    memory_bytes: int
    gpus: int
