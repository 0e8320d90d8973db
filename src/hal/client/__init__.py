"""Python SDK over HAL's REST API. Used by the CLI, the Slurm layer, agents and users.

    from hal.client import HalClient
    with HalClient() as hal:            # HAL_URL / HAL_TOKEN or the local defaults
        job_id = hal.submit(JobSubmit(script="#!/bin/sh\\necho hi\\n")).job_id
        print(hal.job(job_id).state)

Imports nothing from the server; speaks only ``hal.wire`` models.
"""

from hal.client.config import ClientConfig, default_server_url, load_client_config
from hal.client.sync import HalClient

__all__ = ["ClientConfig", "HalClient", "default_server_url", "load_client_config"]
