"""HalError → problem+json, in one place (RFC 9457)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from hal.core.errors import HalError

log = logging.getLogger("hal.api")


def problem(status: int, code: str, detail: str, field: str | None = None) -> JSONResponse:
    body: dict[str, object] = {
        "type": "about:blank",
        "title": code.replace("_", " "),
        "status": status,
        "code": code,
        "detail": detail,
    }
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


def install(app: FastAPI) -> None:
    @app.exception_handler(HalError)
    async def _hal_error(_request: Request, err: HalError) -> JSONResponse:
        return problem(err.http_status, err.code, err.message, err.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(loc) or None
        msg = str(first.get("msg", "invalid request"))
        count = len(err.errors())
        more = f" (and {count - 1} more problems)" if count > 1 else ""
        return problem(400, "invalid_request", f"{field or 'request'}: {msg}{more}", field)
