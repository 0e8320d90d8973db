"""Wire schemas shared by the server and its network clients.

The REST API (``hal.api``), the SDK (``hal.client``), the agent and the Slurm layer all
speak these pydantic models; nothing here imports a server module, so clients can depend on
it without pulling the server in. Conversions to core types live in ``hal.api.convert``.
Units are explicit in field names (``_bytes``, ``_seconds``); times are Unix seconds.
``slurm_json`` is Slurm's JSON for a job (``job_info``), which the slurmrestd facade and
``squeue --json`` both write.
"""
