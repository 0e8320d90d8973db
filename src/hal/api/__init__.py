"""The control plane's HTTP edge: the FastAPI app (REST ``/v1`` with OpenAPI, the event
stream, the agent channel, the dashboard and ``/metrics``), authentication, the conversion
between wire schemas and core types, problem+json errors, the slurmrestd facade, and
``HalServer``, which serves a ``hal.server.ControlPlane`` with uvicorn. The only place that
speaks HTTP to users.

Imports ``hal.server`` (the services it serves), ``state``, ``core`` and ``wire``; nothing
imports it but the CLI, the test kit and the benchmarks.
"""
