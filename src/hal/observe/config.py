"""``ObserveConfig``: what the observability plane does, read from the environment.

The cluster file (``hal.toml``) belongs to the lead's config plane; until it grows an
``[observe]`` table these environment variables configure the plane, which also suits
containers and CI:

================================  ==========================================================
``HAL_METRICS``                   ``0`` turns the metric hooks off (``/metrics`` still
                                  answers with build info); default on
``HAL_TRACING``                   ``0`` turns job traces off; default on (spans are only
                                  built when an exporter is configured)
``OTEL_EXPORTER_OTLP_ENDPOINT``   OTLP/HTTP collector, e.g. ``http://127.0.0.1:4318``;
                                  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` also works
``HAL_LOG_LEVEL``                 ``debug``/``info``/``warning``/``error`` (default info)
``HAL_LOG_FORMAT``                ``json`` (default) or ``console``
``HAL_ALERT_WEBHOOKS``            comma-separated URLs that get Alertmanager-style JSON
``HAL_ALERT_NODE_DOWN_S``         node DOWN this long → ``HalNodeDown`` (default 60)
``HAL_ALERT_FLAP_COUNT``          registrations within ``HAL_ALERT_FLAP_WINDOW_S``
                                  (default 3 in 600 s) → ``HalAgentFlapping``
``HAL_ALERT_QUEUE_STUCK_S``       runnable jobs pending, idle CPUs and no start for this
                                  long → ``HalQueueStuck`` (default 900)
``HAL_ALERT_CYCLE_SLOW_S``        a scheduling cycle slower than this → ``HalSchedulerSlow``
                                  (default 5)
``HAL_ALERT_OVERRUN_FACTOR``      a running job past max(FACTOR × its prediction at start,
                                  prediction + MARGIN) → ``JobOverrunningPrediction``
``HAL_ALERT_OVERRUN_MARGIN_S``    (default 3 and 3600; only predictions of a model)
``HAL_ALERT_NODE_FAIL_MIN_JOBS``  a node with at least MIN_JOBS jobs ended within
                                  WINDOW (default 5 in 3600 s) failing over 3 × its peers'
``HAL_ALERT_NODE_FAIL_WINDOW_S``  median + 0.2 → ``NodeFailureRateAnomalous``
``HAL_ANOMALY_INTERVAL_S``        how often the anomaly detector looks (default 5)
``HAL_PLUGIN_TIMING_INTERVAL_S``  one scheduling pass in this many seconds runs with its
                                  plugin calls timed (``hal_scheduler_plugin_duration_
                                  seconds``); default 10, ``0`` every pass, negative never
``HAL_OUTPUT_RELAY_TIMEOUT_S``    how long a read of job output through the job's agent
                                  may take before ``hal logs`` gives up (default 10)
================================  ==========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObserveConfig:
    metrics: bool = True
    tracing: bool = True
    otlp_endpoint: str = ""
    log_level: str = "info"
    log_format: str = "json"
    webhooks: tuple[str, ...] = ()
    node_down_s: float = 60.0
    flap_count: int = 3
    flap_window_s: float = 600.0
    queue_stuck_s: float = 900.0
    cycle_slow_s: float = 5.0
    alert_interval_s: float = 1.0
    webhook_timeout_s: float = 5.0
    overrun_factor: float = 3.0
    overrun_margin_s: float = 3600.0
    node_fail_min_jobs: int = 5
    node_fail_window_s: float = 3600.0
    anomaly_interval_s: float = 5.0  # how often the anomaly detector looks
    output_relay_timeout_s: float = 10.0  # one read of job output through its agent
    plugin_timing_interval_s: float = 10.0  # one timed pass per this many seconds; <0 never

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ObserveConfig:
        e = os.environ if env is None else env
        base = cls()
        return cls(
            metrics=_flag(e.get("HAL_METRICS"), base.metrics),
            tracing=_flag(e.get("HAL_TRACING"), base.tracing),
            otlp_endpoint=_traces_url(e),
            log_level=e.get("HAL_LOG_LEVEL", base.log_level).lower(),
            log_format=e.get("HAL_LOG_FORMAT", base.log_format).lower(),
            webhooks=tuple(u.strip() for u in e.get("HAL_ALERT_WEBHOOKS", "").split(",") if u),
            node_down_s=float(e.get("HAL_ALERT_NODE_DOWN_S", base.node_down_s)),
            flap_count=int(e.get("HAL_ALERT_FLAP_COUNT", base.flap_count)),
            flap_window_s=float(e.get("HAL_ALERT_FLAP_WINDOW_S", base.flap_window_s)),
            queue_stuck_s=float(e.get("HAL_ALERT_QUEUE_STUCK_S", base.queue_stuck_s)),
            cycle_slow_s=float(e.get("HAL_ALERT_CYCLE_SLOW_S", base.cycle_slow_s)),
            overrun_factor=float(e.get("HAL_ALERT_OVERRUN_FACTOR", base.overrun_factor)),
            overrun_margin_s=float(e.get("HAL_ALERT_OVERRUN_MARGIN_S", base.overrun_margin_s)),
            node_fail_min_jobs=int(e.get("HAL_ALERT_NODE_FAIL_MIN_JOBS", base.node_fail_min_jobs)),
            node_fail_window_s=float(
                e.get("HAL_ALERT_NODE_FAIL_WINDOW_S", base.node_fail_window_s)
            ),
            anomaly_interval_s=float(e.get("HAL_ANOMALY_INTERVAL_S", base.anomaly_interval_s)),
            output_relay_timeout_s=float(
                e.get("HAL_OUTPUT_RELAY_TIMEOUT_S", base.output_relay_timeout_s)
            ),
            plugin_timing_interval_s=float(
                e.get("HAL_PLUGIN_TIMING_INTERVAL_S", base.plugin_timing_interval_s)
            ),
        )


def _flag(text: str | None, default: bool) -> bool:
    if text is None or text == "":
        return default
    return text.strip().lower() not in ("0", "false", "no", "off")


def _traces_url(env: Mapping[str, str]) -> str:
    """The OTLP/HTTP traces URL: the signal-specific variable as is, else the base
    endpoint plus ``/v1/traces`` (as the OTLP exporter specification says)."""
    url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
    if url:
        return url
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    return base.rstrip("/") + "/v1/traces" if base else ""
