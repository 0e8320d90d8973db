"""The observability plane: metrics, job traces, structured logs, alerts and the dashboard.

Owns:
- ``metrics``   Prometheus metrics (``hal_`` prefix, base units) on a private registry,
                fed by the cluster's job-change listener and the scheduler's cycle hook,
                plus scrape-time gauges read from the cluster mirror;
- ``tracing``   one OpenTelemetry trace per job, emitted when the job ends; the ids are
                derived from the job (``traceids``) so ``TRACEPARENT`` is stable;
- ``logging``   JSON logs (structlog over stdlib) carrying job id, node and trace id;
- ``alerts``    the built-in rule evaluator and its webhook notifier;
- ``routes``    ``/metrics``, ``/v1/alerts``, ``/v1/observe/*``, job output, ``/ui``;
- ``plane``     ``ObservePlane``: wires the above into a running ``HalServer``.

May import ``hal.core``, ``hal.config``, ``hal.state``, ``hal.scheduler`` and
``hal.core.filenames`` (pure output-path rules). Only ``routes`` imports ``hal.api``
(``hal.api.context``: the API's one authentication path), and only when
``ObservePlane.install`` mounts it, so ``hal.api.server`` can import ``plane`` without a
cycle. Nothing here runs per job inside the scheduler pass.

Nothing is imported here on purpose: ``hal.state.launch`` imports ``traceids`` and must
not pull in prometheus-client or OpenTelemetry.
"""
