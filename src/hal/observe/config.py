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
``HAL_ALERT_NODE_SLOW_FACTOR``    a node with at least MIN_JOBS runs ended within WINDOW
``HAL_ALERT_NODE_SLOW_MIN_JOBS``  (default 5 in 21600 s) whose median ratio of run time
``HAL_ALERT_NODE_SLOW_WINDOW_S``  to prediction is over FACTOR (default 1.5) × that of
                                  the runs elsewhere, beyond chance → ``NodeRuntimeInflated``
``HAL_ANOMALY_INTERVAL_S``        how often the anomaly detector looks (default 5)
``HAL_PLUGIN_TIMING_INTERVAL_S``  one scheduling pass in this many seconds runs with its
                                  plugin calls timed (``hal_scheduler_plugin_duration_
                                  seconds``); default 10, ``0`` every pass, negative never
``HAL_LOOP_STALL_LOG_S``          log the server's event loop held this long or longer,
                                  with where its thread was (its stacks); default 0, off
                                  (``hal.server.observe.loop_lag``)
``HAL_GC_THAW_S``                 the server's heap is frozen after each full garbage
                                  collection and thawed this often (default 600; 0:
                                  never frozen; ``hal.server.observe.heap``)
``HAL_OUTPUT_RELAY_TIMEOUT_S``    how long a read of job output through the job's agent
                                  may take before ``hal logs`` gives up (default 10)
================================  ==========================================================

An empty value means the default; anything else malformed (``HAL_ALERT_FLAP_COUNT=3.5``,
``HAL_ALERT_NODE_DOWN_S=1m``, a negative number of seconds, ``HAL_LOG_LEVEL=verbose``,
``HAL_METRICS=disabled`` (on/off are ``1``/``0``, ``true``/``false``, ``yes``/``no``,
``on``/``off``), a webhook that is not an http(s) URL) stops the server at start with
the variable's name and what to set.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hal.core.errors import InvalidRequest

LOG_LEVELS = ("debug", "info", "warning", "error")  # (hal.observe.logging.LEVELS maps them)
LOG_FORMATS = ("json", "console")


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
    node_slow_factor: float = 1.5
    node_slow_min_jobs: int = 5
    node_slow_window_s: float = 21_600.0
    anomaly_interval_s: float = 5.0  # how often the anomaly detector looks
    output_relay_timeout_s: float = 10.0  # one read of job output through its agent
    plugin_timing_interval_s: float = 10.0  # one timed pass per this many seconds; <0 never
    loop_stall_log_s: float = 0.0  # log the event loop held this long, with its stacks; 0 off
    gc_thaw_s: float = 600.0  # the heap frozen after each full collection, thawed this often
    slow_pass_log_s: float = 2.0  # log a scheduling pass this long, stage by stage; 0 off

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ObserveConfig:
        """The settings from ``env`` (default ``os.environ``). A malformed value raises
        ``InvalidRequest`` naming the variable, so ``hal up``/``hal server`` stop at once
        with what to set instead of a traceback."""
        e = os.environ if env is None else env
        base = cls()

        def number(name: str, default: float, *, minimum: float | None = 0.0) -> float:
            return _number(e, name, default, minimum=minimum)

        return cls(
            metrics=_flag(e, "HAL_METRICS", base.metrics),
            tracing=_flag(e, "HAL_TRACING", base.tracing),
            otlp_endpoint=_traces_url(e),
            log_level=_choice(e, "HAL_LOG_LEVEL", base.log_level, LOG_LEVELS),
            log_format=_choice(e, "HAL_LOG_FORMAT", base.log_format, LOG_FORMATS),
            webhooks=_webhooks(e),
            node_down_s=number("HAL_ALERT_NODE_DOWN_S", base.node_down_s),
            flap_count=_count(e, "HAL_ALERT_FLAP_COUNT", base.flap_count),
            flap_window_s=number("HAL_ALERT_FLAP_WINDOW_S", base.flap_window_s),
            queue_stuck_s=number("HAL_ALERT_QUEUE_STUCK_S", base.queue_stuck_s),
            cycle_slow_s=number("HAL_ALERT_CYCLE_SLOW_S", base.cycle_slow_s),
            overrun_factor=number("HAL_ALERT_OVERRUN_FACTOR", base.overrun_factor),
            overrun_margin_s=number("HAL_ALERT_OVERRUN_MARGIN_S", base.overrun_margin_s),
            node_fail_min_jobs=_count(e, "HAL_ALERT_NODE_FAIL_MIN_JOBS", base.node_fail_min_jobs),
            node_fail_window_s=number("HAL_ALERT_NODE_FAIL_WINDOW_S", base.node_fail_window_s),
            node_slow_factor=number(
                "HAL_ALERT_NODE_SLOW_FACTOR", base.node_slow_factor, minimum=1.0
            ),
            node_slow_min_jobs=_count(e, "HAL_ALERT_NODE_SLOW_MIN_JOBS", base.node_slow_min_jobs),
            node_slow_window_s=number("HAL_ALERT_NODE_SLOW_WINDOW_S", base.node_slow_window_s),
            anomaly_interval_s=number("HAL_ANOMALY_INTERVAL_S", base.anomaly_interval_s),
            output_relay_timeout_s=number(
                "HAL_OUTPUT_RELAY_TIMEOUT_S", base.output_relay_timeout_s
            ),
            plugin_timing_interval_s=number(
                "HAL_PLUGIN_TIMING_INTERVAL_S", base.plugin_timing_interval_s, minimum=None
            ),
            loop_stall_log_s=number("HAL_LOOP_STALL_LOG_S", base.loop_stall_log_s),
            gc_thaw_s=number("HAL_GC_THAW_S", base.gc_thaw_s),
            slow_pass_log_s=number("HAL_SLOW_PASS_LOG_S", base.slow_pass_log_s),
        )


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float | None) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        least = "" if minimum is None else f" of at least {minimum:g}"
        raise InvalidRequest(
            f"{name}={text!r} is not valid: set it to a number{least}, "
            f"or unset it for the default ({default:g})",
            field=name,
        )
    return value


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InvalidRequest(
            f"{name}={text!r} is not valid: set it to a whole number of at least 1, "
            f"or unset it for the default ({default})",
            field=name,
        )
    return int(text)


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text not in choices:
        raise InvalidRequest(
            f"{name}={text!r} is not valid: use one of {', '.join(choices)}", field=name
        )
    return text


_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """On or off; anything else (``HAL_METRICS=disabled``) was taken as on."""
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text not in _OFF + _ON:
        raise InvalidRequest(
            f"{name}={text!r} is not valid: use 0 (off) or 1 (on), or unset it for the "
            f"default ({'on' if default else 'off'})",
            field=name,
        )
    return text in _ON


def _webhooks(env: Mapping[str, str]) -> tuple[str, ...]:
    """``HAL_ALERT_WEBHOOKS``: http(s) URLs, comma-separated (a typo was only found at
    the first alert, as a failed delivery in the log)."""
    urls = tuple(u.strip() for u in env.get("HAL_ALERT_WEBHOOKS", "").split(",") if u.strip())
    for url in urls:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
            raise InvalidRequest(
                f"HAL_ALERT_WEBHOOKS: {url!r} is not an http(s) URL; give URLs like "
                "http://receiver:5001/hook, separated by commas",
                field="HAL_ALERT_WEBHOOKS",
            )
    return urls


def _traces_url(env: Mapping[str, str]) -> str:
    """The OTLP/HTTP traces URL: the signal-specific variable as is, else the base
    endpoint plus ``/v1/traces`` (as the OTLP exporter specification says)."""
    url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
    if url:
        return url
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    return base.rstrip("/") + "/v1/traces" if base else ""
