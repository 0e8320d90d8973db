"""The HAL error tree.

Scheduling outcomes are ``Status`` values, never exceptions. Everything a *user* or an
operator can get wrong is a ``HalError`` with a stable ``code`` that the API maps to an HTTP
status (problem+json) and the CLI maps to an exit code, each in one place::

    HalError
     ├── InvalidRequest        400  a field is malformed or out of range (names the field)
     │    ├── UnsupportedOption 400  a Slurm option HAL does not implement
     │    └── BadConstraints    400  asks for what the cluster lacks (a topology level)
     ├── Unauthenticated       401  missing or unknown token
     ├── PermissionDenied      403  the user may not touch this object
     ├── NotFound              404  unknown job, node, partition, user
     │    └── NotConfigured     404  a plane this server does not run (data, prediction, ...)
     ├── Conflict              409  the object is in a state that forbids the operation
     ├── PayloadTooLarge       413  request bigger than the server accepts
     ├── TooManyRequests       429  over a rate limit (wait, then send again)
     └── Unavailable           503  the server cannot serve right now (retry)

Bugs raise ordinary exceptions. Messages say what to do next.
"""

from __future__ import annotations

# Every CLI command (a new process per job for a workflow tool's sbatch) imports this
# module at start-up: ``typing`` and ``difflib`` are imported where they are needed.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import ClassVar


class HalError(Exception):
    """Base of every user-facing error. ``code`` is stable; ``field`` names the culprit."""

    code: ClassVar[str] = "hal_error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class InvalidRequest(HalError):
    code = "invalid_request"
    http_status = 400


class UnsupportedOption(InvalidRequest):
    code = "unsupported_option"


class BadConstraints(InvalidRequest):
    """The job asks for something this cluster does not have (e.g. a topology level)."""

    code = "bad_constraints"


class Unauthenticated(HalError):
    code = "unauthenticated"
    http_status = 401


class PermissionDenied(HalError):
    code = "permission_denied"
    http_status = 403


class NotFound(HalError):
    code = "not_found"
    http_status = 404


class NotConfigured(NotFound):
    """The request needs a part this server was not configured to run (the data plane,
    the prediction service, ...): a 404, not a 503, since asking again will not help until
    an administrator turns the part on; the message says how."""

    code = "not_configured"


class Conflict(HalError):
    code = "conflict"
    http_status = 409


class PayloadTooLarge(HalError):
    code = "payload_too_large"
    http_status = 413


class TooManyRequests(HalError):
    code = "too_many_requests"
    http_status = 429


class Unavailable(HalError):
    code = "unavailable"
    http_status = 503


ERRORS_BY_CODE: dict[str, type[HalError]] = {
    cls.code: cls
    for cls in (
        HalError,
        InvalidRequest,
        UnsupportedOption,
        BadConstraints,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        NotConfigured,
        Conflict,
        PayloadTooLarge,
        TooManyRequests,
        Unavailable,
    )
}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'max_time'?)`` when ``word`` is a near miss of one of ``choices``
    (a typo in a config key or argument), else ``""``."""
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
