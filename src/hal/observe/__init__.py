"""What every HAL process uses to be observed: structured JSON logs (``logging``, with
its settings in ``config``), the Prometheus endpoint of an agent or a cache node
(``listener``, with the cache node's collector in ``cachemetrics``), the trace ids a job
carries (``traceids``: derived from the job, so ``TRACEPARENT`` is stable), and the safe
reading of a job's output files (``outputfiles``), shared by the node agent that serves a
read and the control plane that reads a file it can see.

The control plane's observability plane — its metrics, job traces, alerts, anomalies and
the sdiag statistics — is ``hal.server.observe``; the dashboard and ``/metrics`` are served
by the HTTP edge (``hal.api.routes_observe``).

Imports ``hal.core`` and ``hal.wire`` only, so agents and cache nodes may use it without
pulling in the server. Nothing is imported here on purpose: ``hal.state.launch`` imports
``traceids`` and must not pull in prometheus-client or OpenTelemetry.
"""
