"""The ``hal_job_feedback`` gauges: each running job's latest reported value of each of
its metrics (``hal feedback``; ``hal.server.feedback``). A job that ended has none."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric


def feedback_metrics(latest: Mapping[int, Mapping[str, float]]) -> Iterable[Metric]:
    gauge = GaugeMetricFamily(
        "hal_job_feedback",
        "The latest value a running job reported about itself (hal feedback), by metric.",
        labels=["job_id", "metric"],
    )
    for job_id in sorted(latest):
        values = latest[job_id]
        for metric in sorted(values):
            gauge.add_metric([str(job_id), metric], values[metric])
    yield gauge
