"""Python SDK over HAL's REST API. Used by the CLI, the Slurm layer, agents and users.

    from hal.client import HalClient
    with HalClient() as hal:            # HAL_URL / HAL_TOKEN or the local defaults
        job_id = hal.submit(JobSubmit(script="#!/bin/sh\\necho hi\\n")).job_id
        print(hal.job(job_id).state)

Imports nothing from the server; speaks only ``hal.wire`` models.

Every ``sbatch`` and ``squeue`` a workflow tool runs is a new process that imports this
package (issue 51: their target is 3× a bare interpreter's start). So at import its
modules bring in only C parts of the standard library: HTTP goes over ``_socket``
(``transport``), JSON through ``_json`` (``cjson``); the wire schemas (pydantic, and
``dataclasses`` for ``hal.wire.submit``), ``typing``, ``pathlib``, ``logging`` (a
retry's message) and ``select`` (a kept-alive connection's check) are imported inside
the functions that use them, and ``urllib.parse`` only for a URL that is not plain
(``transport.split_url``). ``submit_fields`` and ``validate=False``
(``records``) serve those commands without the schemas, and ``HalClient`` (``sync``)
loads when first named, so a process that reads ``config`` alone (a node agent) skips it;
tests/unit/compat/test_start_imports.py checks what they load.
"""

from hal.client.config import ClientConfig, default_server_url, load_client_config

TYPE_CHECKING = False  # typing's own costs ``re`` and ``enum``, which this package avoids
if TYPE_CHECKING:
    from hal.client.sync import HalClient

__all__ = ["ClientConfig", "HalClient", "default_server_url", "load_client_config"]


def __getattr__(name: str) -> object:
    """``HalClient`` on first use: a process that imports ``hal.client.config`` alone (a
    node agent, whose channel is async) does not load the synchronous client."""
    if name == "HalClient":
        from hal.client.sync import HalClient

        return HalClient
    raise AttributeError(f"module 'hal.client' has no attribute {name!r}")
