"""The server's errors as the client sees them: a problem+json answer rebuilt as the
``HalError`` the server raised, and when a refused request may be sent again."""

from __future__ import annotations

from hal.client import cjson
from hal.client.transport import Response
from hal.core.errors import ERRORS_BY_CODE, HalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def retry_after(response: Response, left: float, keyed: bool) -> float | None:
    """Seconds to wait before sending again, when the server says its database is away
    and ``left`` seconds remain; else None. A 503 ``database_unavailable`` (the request's
    transaction rolled back) is safe to send again, a submit included; a 503
    ``commit_outcome_unknown`` (lost at the COMMIT) only with an ``Idempotency-Key``."""
    code = _code(response.body) if response.status == 503 else ""
    if left <= 0 or not (
        code == "database_unavailable" or (keyed and code == "commit_outcome_unknown")
    ):
        return None
    try:
        wait = float(response.headers.get("retry-after", "5"))
    except ValueError:
        wait = 5.0
    retrying(error_from_response(response).message, left)
    return min(max(wait, 0.0), left)


def retrying(why: str, left: float) -> None:
    """Log a wait (on stderr when nothing configured logging: the CLI's "retrying", as
    Slurm's)."""
    import logging  # only here: every sbatch imports this module

    logging.getLogger("hal.client").warning(
        "%s; retrying for up to %.0f s more (HAL_RETRY_SECONDS)", why, left
    )


def error_from_response(response: Any) -> HalError:
    """Rebuild the server's HalError from its problem+json body.

    Takes this package's ``Response`` or any response object with httpx's shape
    (``status_code``, ``content``), so other network clients map errors the same way."""
    if isinstance(response, Response):
        status, payload, reason = response.status, response.body, response.reason
    else:
        status = int(response.status_code)
        payload = bytes(response.content)
        reason = str(getattr(response, "reason_phrase", ""))
    return error_from_payload(status, payload, reason)


def _problem(payload: bytes) -> dict[str, Any]:
    """The problem+json body, or {} when it is none."""
    try:
        body = cjson.loads(payload)
    except ValueError:  # (JSONDecodeError, UnicodeDecodeError)
        return {}
    return body if isinstance(body, dict) else {}


def _code(payload: bytes) -> str:
    return str(_problem(payload).get("code", ""))


def error_from_payload(status: int, payload: bytes, reason: str = "") -> HalError:
    body = _problem(payload)
    code = str(body.get("code", ""))
    text = payload.decode("utf-8", "replace")
    detail = str(body.get("detail") or body.get("message") or text or reason)
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        cls = next((c for c in ERRORS_BY_CODE.values() if c.http_status == status), HalError)
    field = body.get("field")
    return cls(detail, field=str(field) if field else None)
