"""Python SDK over HAL's REST API. Used by the CLI, the Slurm layer, agents and users.

    from hal.client import HalClient
    with HalClient() as hal:            # HAL_URL / HAL_TOKEN or the local defaults
        job_id = hal.submit(JobSubmit(script="#!/bin/sh\\necho hi\\n")).job_id
        print(hal.job(job_id).state)

Imports nothing from the server; speaks only ``hal.wire`` models.

Every ``sbatch`` and ``squeue`` a workflow tool runs is a new process that imports this
package (issue 51: they start within 3× a bare interpreter). So its modules import, at
run time, nothing but the standard library's ``json``, ``socket`` and ``select``: the
wire schemas (pydantic, and ``dataclasses`` for ``hal.wire.submit``), ``typing``,
``pathlib`` and ``urllib.parse`` only inside the methods that use them.
``submit_fields`` and ``validate=False`` (``records``) serve those commands without the
schemas; tests/unit/compat/test_start_imports.py holds the line.
"""

from hal.client.config import ClientConfig, default_server_url, load_client_config
from hal.client.sync import HalClient

__all__ = ["ClientConfig", "HalClient", "default_server_url", "load_client_config"]
