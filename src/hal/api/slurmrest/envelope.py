"""The response envelope every slurmrestd answer carries (its ``meta``, the versions and
no_val numbers are ``hal.wire.slurm_json``'s), and the Slurm error numbers the facade
answers with.

The numbers and texts below are libslurm 22.05.8's ``slurm_strerror()`` (checked, see
docs/slurm-checks.md "slurmrestd"); clients read ``error_number`` and show
``description``. The HTTP status follows what slurmrestd 22.05.8 answered: 400 for a
request its REST layer could not read (9000-9999), 500 for a refusal from slurmctld
(any other Slurm error number).
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from hal.wire.slurm_json import ApiVersion, meta

# (error_number, error): Slurm's number and its slurm_strerror() text
EINVAL = (22, "Invalid argument")
PROTOCOL_AUTHENTICATION_ERROR = (1007, "Protocol authentication error")
INVALID_PARTITION_NAME = (2000, "Invalid partition name specified")
ACCESS_DENIED = (2002, "Access/permission denied")
JOB_SCRIPT_MISSING = (2009, "Job script not specified")
REQUESTED_NODE_CONFIG_UNAVAILABLE = (2014, "Requested node configuration is not available")
INVALID_JOB_ID = (2017, "Invalid job id specified")
INVALID_NODE_NAME = (2018, "Invalid node name specified")
ALREADY_DONE = (2021, "Job/step already completing or completed")
JOB_FINISHED = (2084, "Job has already finished")
REST_INVALID_QUERY = (9000, "Query empty or not RFC7320 compliant")
REST_FAIL_PARSING = (9001, "Failure during parsing")
REST_INVALID_JOBS_DESC = (9002, "Jobs description entry not found, empty or not dictionary or list")
REST_EMPTY_RESULT = (9003, "Nothing found with query")
SLURM_ERROR = (-1, "Unspecified error")

PLUGIN = ("openapi/slurmctld", "HAL slurmrestd facade")  # meta.plugin's type and name


def http_status(errors: list[dict[str, object]]) -> int:
    """slurmrestd's status for an answer with these ``errors``: 400 when only its REST
    layer refused (9000-9999: a query or body it could not read), else 500 (slurmctld
    refused: an unknown job or partition, a missing script, ...)."""
    numbers = [e.get("error_number") for e in errors]
    rest = all(isinstance(n, int) and 9000 <= n < 10000 for n in numbers)
    return 400 if rest else 500


class SlurmRestError(Exception):
    """A refusal answered as an envelope with one ``errors`` entry and ``status``
    (``body``: the route's data that comes with it, as slurmrestd's ``"jobs": []``)."""

    def __init__(
        self,
        status: int,
        errno: tuple[int, str],
        description: str,
        source: str = "",
        body: dict[str, object] | None = None,
    ) -> None:
        super().__init__(description)
        self.status = status
        self.errno = errno
        self.description = description
        self.source = source
        self.body = body or {}

    def entry(self) -> dict[str, object]:
        return error_entry(self.errno, self.description, self.source)


def error_entry(errno: tuple[int, str], description: str, source: str = "") -> dict[str, object]:
    return {
        "description": description,
        "error_number": errno[0],
        "error": errno[1],
        "source": source,
    }


def warning_entry(description: str, source: str = "") -> dict[str, object]:
    return {"description": description, "source": source}


def envelope(
    version: ApiVersion,
    cluster: str,
    body: dict[str, object],
    *,
    user: str = "",
    source: str = "",
    errors: list[dict[str, object]] | None = None,
    warnings: list[dict[str, object]] | None = None,
    status: int = 200,
) -> JSONResponse:
    return JSONResponse(
        {
            **body,
            "meta": meta(version, cluster, user=user, source=source, plugin=PLUGIN),
            "errors": errors or [],
            "warnings": warnings or [],
        },
        status_code=status,
    )
