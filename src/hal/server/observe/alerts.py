"""The built-in alert evaluator and its webhook notifier.

The same essentials as ``deploy/prometheus/hal-alerts.yml``, for clusters that run no
Prometheus/Alertmanager (a laptop's ``hal up``, a small lab):

=====================  ==========================================================  ========
alert                  fires when                                                  severity
=====================  ==========================================================  ========
``HalNodeDown``        a node is DOWN (not by an operator) for ``node_down_s``      critical
``HalAgentFlapping``   a node's agent registered ``flap_count`` times within        warning
                       ``flap_window_s``
``HalQueueStuck``      runnable jobs (Priority/Resources/WaitingForScheduling)     warning
                       waited ``queue_stuck_s``, CPUs are idle on UP nodes, and no
                       job started in that time
``HalSchedulerSlow``   the last scheduling cycle took longer than ``cycle_slow_s`` warning
``HalGpuUnhealthy``    a node is drained by its GPUs' health read (a lost GPU,     critical
                       uncorrectable ECC errors, a pending row remap)
=====================  ==========================================================  ========

More findings come from ``sources`` (each a function of ``now``): the anomaly detector
(``hal.server.observe.anomalies``) adds ``JobOverrunningPrediction`` (a running job far past
its predicted run time: a possible hang), ``NodeFailureRateAnomalous`` (a node whose
jobs fail far more often than its peers' do) and ``NodeRuntimeInflated`` (a node whose
jobs run far longer than predicted, against the runs elsewhere), all warnings.

``evaluate(now)`` is called about once a second by ``ObservePlane``; it is a pure function
of what it observed, so tests drive it with explicit times. A firing alert's summary is
rewritten each time (its numbers stay current, as Prometheus re-renders annotations).
A change (firing or resolved) is queued for the webhooks as Alertmanager's webhook JSON
(version 4), which receivers that already accept Alertmanager understand; deliveries
run in the background with a timeout, and a failure is logged and counted, never raised
into the evaluator.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from hal.core.states import JobState, NodeState, PendingReason
from hal.observe.config import ObserveConfig
from hal.state.agents import GPU_HEALTH
from hal.state.cluster import Cluster
from hal.state.node_reasons import set_down_by_operator

log = logging.getLogger("hal.server.observe.alerts")
RUNNABLE = frozenset(
    {PendingReason.PRIORITY, PendingReason.RESOURCES, PendingReason.WAITING_FOR_SCHEDULING}
)
MAX_RESOLVED = 50  # resolved alerts kept for the dashboard


@dataclass(slots=True)
class Alert:
    name: str
    severity: str
    summary: str
    labels: dict[str, str]
    starts_at: float
    ends_at: float | None = None

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.name, tuple(sorted(self.labels.items()))

    @property
    def firing(self) -> bool:
        return self.ends_at is None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "severity": self.severity,
            "summary": self.summary,
            "labels": self.labels,
            "state": "firing" if self.firing else "resolved",
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
        }


@dataclass(slots=True)
class Finding:
    """Something an alert rule found: it fires while found, resolves when no longer."""

    name: str
    severity: str
    summary: str
    labels: dict[str, str] = field(default_factory=dict)


class AlertEvaluator:
    def __init__(
        self,
        cluster: Cluster,
        config: ObserveConfig,
        *,
        last_start: Callable[[], float],
        last_cycle_s: Callable[[], float],
        on_registration: Callable[[str], None] = lambda _node: None,
        on_forgotten: Callable[[str], None] = lambda _node: None,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.last_start = last_start  # when a job last started (0: never)
        self.last_cycle_s = last_cycle_s  # the last scheduling cycle's duration (pass + slice)
        self.on_registration = on_registration
        self.on_forgotten = on_forgotten
        self.active: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}
        self.resolved: deque[Alert] = deque(maxlen=MAX_RESOLVED)
        self.changes: asyncio.Queue[Alert] | None = None
        self._down_since: dict[str, float] = {}
        self._sessions: dict[str, object] = {}
        self._registrations: dict[str, deque[float]] = {}
        self._started_at: float | None = None
        self.sources: list[Callable[[float], Iterable[Finding]]] = []

    def firing(self) -> list[Alert]:
        return sorted(self.active.values(), key=lambda a: (a.starts_at, a.name))

    def firing_labels(self) -> Iterable[tuple[str, str]]:
        return sorted({(a.name, a.severity) for a in self.active.values()})

    # -- one evaluation -------------------------------------------------------------------
    def evaluate(self, now: float) -> list[Alert]:
        """Update the alert set from the cluster as of ``now``; return what changed."""
        if self._started_at is None:
            self._started_at = now
        self._watch_agents(now)
        found = [*self._node_down(now), *self._flapping(now), *self._queue_stuck(now)]
        found.extend(self._scheduler_slow())
        found.extend(self._gpu_unhealthy())
        for source in self.sources:
            found.extend(source(now))
        changed: list[Alert] = []
        seen = set()
        for f in found:
            alert = Alert(f.name, f.severity, f.summary, f.labels, now)
            seen.add(alert.key)
            current = self.active.get(alert.key)
            if current is None:
                self.active[alert.key] = alert
                changed.append(alert)
            else:  # still firing: its numbers (down for, jobs waiting) as of now
                current.summary = f.summary
        for key in [k for k in self.active if k not in seen]:
            alert = self.active.pop(key)
            alert.ends_at = now
            self.resolved.appendleft(alert)
            changed.append(alert)
        for alert in changed:
            log.warning(
                "alert %s", "firing" if alert.firing else "resolved",
                extra={"alertname": alert.name, "alert_labels": alert.labels,
                       "summary": alert.summary},
            )  # fmt: skip
            if self.changes is not None:
                self.changes.put_nowait(alert)
        return changed

    def _watch_agents(self, now: float) -> None:
        # A node removed (a [cloud] node the autoscaler deleted) takes its registrations
        # with it: the next node of that name is a new machine, not a flapping agent.
        for node in [n for n in self._registrations if n not in self.cluster.nodes]:
            del self._registrations[node]
            self._sessions.pop(node, None)
            self.on_forgotten(node)
        # A new session object for a node means its agent (re-)registered.
        for node, session in self.cluster.agent_sessions.items():
            if self._sessions.get(node) is not session:
                self._sessions[node] = session
                self._registrations.setdefault(node, deque(maxlen=64)).append(now)
                self.on_registration(node)

    def _node_down(self, now: float) -> Iterable[Finding]:
        for name, node in self.cluster.nodes.items():
            if node.state is not NodeState.DOWN or set_down_by_operator(node):
                self._down_since.pop(name, None)
                continue
            since = self._down_since.setdefault(name, now)
            if now - since >= self.config.node_down_s:
                yield Finding(
                    "HalNodeDown",
                    "critical",
                    f"node {name} is DOWN ({node.reason or 'no reason'}) for {now - since:.0f} s",
                    {"node": name},
                )

    def _gpu_unhealthy(self) -> Iterable[Finding]:
        for name, node in self.cluster.nodes.items():
            if node.state is NodeState.DRAIN and node.reason.startswith(GPU_HEALTH):
                problems = node.reason.removeprefix(GPU_HEALTH)
                yield Finding(
                    "HalGpuUnhealthy",
                    "critical",
                    f"node {name}: {problems}; the node is drained",
                    {"node": name},
                )

    def _flapping(self, now: float) -> Iterable[Finding]:
        window = self.config.flap_window_s
        least = self.config.flap_count
        for node, times in self._registrations.items():
            if len(times) < least:  # (most nodes: registered once; 10,000 of them each tick)
                continue
            recent = sum(1 for t in times if now - t <= window)
            if recent >= self.config.flap_count:
                yield Finding(
                    "HalAgentFlapping",
                    "warning",
                    f"the agent of node {node} registered {recent} times in {window:.0f} s",
                    {"node": node},
                )

    def _queue_stuck(self, now: float) -> Iterable[Finding]:
        stuck_s = self.config.queue_stuck_s
        assert self._started_at is not None
        if now - max(self.last_start(), self._started_at) < stuck_s:
            return
        cluster = self.cluster
        idle = 0
        for name, node in cluster.nodes.items():
            if node.state is NodeState.UP:
                used = cluster.usage.get(name)
                idle += node.resources.cpus - (used.allocated.cpus if used else 0)
        if idle <= 0:
            return
        waiting = sum(
            1
            for j in cluster.jobs.values()
            if j.state is JobState.PENDING
            and j.reason in RUNNABLE
            and now - j.submit_time >= stuck_s
        )
        if waiting:
            yield Finding(
                "HalQueueStuck",
                "warning",
                f"{waiting} runnable job(s) pending for over {stuck_s:.0f} s with {idle} idle "
                "CPU(s) and no job started",
            )

    def _scheduler_slow(self) -> Iterable[Finding]:
        last = self.last_cycle_s()
        if last > self.config.cycle_slow_s:
            yield Finding(
                "HalSchedulerSlow",
                "warning",
                f"the last scheduling cycle (pass and forecast slice) took {last:.2f} s "
                f"(limit {self.config.cycle_slow_s} s)",
            )


def _iso(t: float | None) -> str:
    if t is None:
        return "0001-01-01T00:00:00Z"  # Alertmanager's "not ended"
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def webhook_payload(alert: Alert, cluster_name: str, external_url: str = "") -> dict[str, object]:
    """Alertmanager webhook JSON (version 4) for one alert change."""
    labels = {"alertname": alert.name, "severity": alert.severity, "cluster": cluster_name,
              **alert.labels}  # fmt: skip
    status = "firing" if alert.firing else "resolved"
    fingerprint = hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
    return {
        "version": "4",
        "status": status,
        "receiver": "hal",
        "groupKey": f"{{}}:{{alertname={alert.name!r}}}",
        "truncatedAlerts": 0,
        "groupLabels": {"alertname": alert.name},
        "commonLabels": labels,
        "commonAnnotations": {"summary": alert.summary},
        "externalURL": external_url,
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": {"summary": alert.summary},
                "startsAt": _iso(alert.starts_at),
                "endsAt": _iso(alert.ends_at),
                "generatorURL": external_url + "/ui#alerts" if external_url else "",
                "fingerprint": fingerprint,
            }
        ],
    }


class WebhookNotifier:
    """Posts every alert change to each URL; one delivery at a time, in order."""

    def __init__(
        self,
        urls: Iterable[str],
        cluster_name: str,
        *,
        timeout_s: float = 5.0,
        on_result: Callable[[bool], None] = lambda _ok: None,
    ) -> None:
        self.urls = tuple(urls)
        self.cluster_name = cluster_name
        self.timeout_s = timeout_s
        self.on_result = on_result

    async def run(self, changes: asyncio.Queue[Alert]) -> None:
        async with httpx.AsyncClient(timeout=self.timeout_s) as http:
            while True:
                alert = await changes.get()
                body = webhook_payload(alert, self.cluster_name)
                for url in self.urls:
                    ok = False
                    with contextlib.suppress(httpx.HTTPError):
                        response = await http.post(url, json=body)
                        ok = response.status_code < 300
                    if not ok:
                        log.warning("alert webhook delivery failed", extra={"url": url})
                    self.on_result(ok)
