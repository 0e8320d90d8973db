"""The control-plane server: REST ``/v1`` with OpenAPI, the event stream, the agent channel,
authentication and error mapping. The only place that speaks HTTP to users.

Imports ``core``, ``config``, ``state``, ``scheduler`` and ``wire``.
"""
