"""The observability plane: metrics, job traces, structured logs, alerts and the dashboard.

Owns:
- ``metrics``   Prometheus metrics (``hal_`` prefix, base units) on a private registry,
                fed by the cluster's job-change listener and the scheduler's cycle hook,
                plus scrape-time gauges read from the cluster mirror;
- ``tracing``   one OpenTelemetry trace per job, emitted when the job ends; the ids are
                derived from the job (``traceids``) so ``TRACEPARENT`` is stable;
- ``logging``   JSON logs (structlog over stdlib) carrying job id, node and trace id;
- ``alerts``    the built-in rule evaluator and its webhook notifier;
- ``plane``     ``ObservePlane``: wires the above into a running control plane;
- ``dashboard`` the dashboard's static files, served with ``/metrics`` and
                ``/v1/observe/*`` by the HTTP edge (``hal.api.routes_observe``).

May import ``hal.core``, ``hal.config``, ``hal.state``, ``hal.scheduler`` and
``hal.core.filenames`` (pure output-path rules); never ``hal.api`` or ``hal.server``.
Nothing here runs per job inside the scheduler pass.

Nothing is imported here on purpose: ``hal.state.launch`` imports ``traceids`` and must
not pull in prometheus-client or OpenTelemetry.
"""
