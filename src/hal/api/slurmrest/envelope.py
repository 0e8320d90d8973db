"""The response envelope every slurmrestd answer carries, no_val numbers, and the Slurm
error numbers the facade answers with.

Slurm's error numbers and texts below are ``slurm_errno.h``'s as remembered, not checked
against a running slurmrestd; clients read ``error_number`` and show ``description``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi.responses import JSONResponse

from hal import __version__

# (error_number, error): Slurm's number and its slurm_strerror() text
EINVAL = (22, "Invalid argument")
PROTOCOL_AUTHENTICATION_ERROR = (1007, "Protocol authentication error")
INVALID_PARTITION_NAME = (2000, "Invalid partition name specified")
ACCESS_DENIED = (2002, "Access/permission denied")
REQUESTED_NODE_CONFIG_UNAVAILABLE = (2014, "Requested node configuration is not available")
INVALID_JOB_ID = (2017, "Invalid job id specified")
INVALID_NODE_NAME = (2018, "Invalid node name specified")
ALREADY_DONE = (2021, "Job/step already completing or completed")
REST_INVALID_QUERY = (9000, "Query empty or not RFC7320 compliant")
REST_FAIL_PARSING = (9001, "Failure during parsing")
REST_EMPTY_RESULT = (9003, "Nothing found with query")
SLURM_ERROR = (-1, "Unspecified error")


@dataclass(frozen=True, slots=True)
class ApiVersion:
    """One data_parser version the facade is mounted at, and the Slurm release of it."""

    data_parser: str  # "v0.0.45"
    slurm: tuple[str, str, str]  # (major, minor, micro)


V45 = ApiVersion("v0.0.45", ("26", "11", "0"))
V44 = ApiVersion("v0.0.44", ("25", "11", "0"))


class SlurmRestError(Exception):
    """A refusal answered as an envelope with one ``errors`` entry and ``status``."""

    def __init__(
        self, status: int, errno: tuple[int, str], description: str, source: str = ""
    ) -> None:
        super().__init__(description)
        self.status = status
        self.errno = errno
        self.description = description
        self.source = source

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


def meta(version: ApiVersion, cluster: str, user: str = "", source: str = "") -> dict[str, object]:
    major, minor, micro = version.slurm
    return {
        "plugin": {
            "type": "openapi/slurmctld",
            "name": "HAL slurmrestd facade",
            "data_parser": f"data_parser/{version.data_parser}",
            "accounting_storage": "",
        },
        "client": {"source": source, "user": user, "group": ""},
        "command": [],
        "slurm": {
            "version": {"major": major, "minor": minor, "micro": micro},
            "release": f"{major}.{minor}.{micro} (HAL {__version__})",
            "cluster": cluster,
        },
    }


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
            "meta": meta(version, cluster, user, source),
            "errors": errors or [],
            "warnings": warnings or [],
        },
        status_code=status,
    )


def no_val(number: float | int | None, *, infinite: bool = False) -> dict[str, object]:
    """Slurm's no_val struct: ``None`` is unset, ``infinite`` is unlimited."""
    if infinite:
        return {"set": False, "infinite": True, "number": 0}
    if number is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": int(number)}
