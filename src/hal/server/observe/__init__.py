"""The control plane's observability plane: metrics, job traces, alerts and the statistics
``sdiag`` shows.

Owns:
- ``metrics``   Prometheus metrics (``hal_`` prefix, base units) on a private registry,
                fed by the cluster's job-change listener and the scheduler's cycle hook,
                plus scrape-time gauges read from the cluster mirror;
- ``tracing``   one OpenTelemetry trace per job, emitted when the job ends (its ids from
                ``hal.observe.traceids``);
- ``alerts``    the built-in rule evaluator and its webhook notifier; ``anomalies`` the
                detector of jobs that ran far from their prediction;
- ``diag``, ``rpc_stats``  the scheduler's and the API's statistics (``sdiag``);
- ``joboutput``, ``outputrelay``  a job's output, read here or through its node's agent;
- ``plane``     ``ObservePlane``: wires the above into a running ``ControlPlane``.

Its routes (``/metrics``, ``/v1/observe/*``, the dashboard) are the HTTP edge's
(``hal.api.routes_observe``). Imports ``state``, ``scheduler``, ``config``, ``predict``,
``wire``, ``core`` and the shared ``hal.observe``; never ``hal.api``. Nothing here runs per
job inside the scheduler pass.
"""
