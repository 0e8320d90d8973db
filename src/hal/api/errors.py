"""HalError → problem+json, in one place (RFC 9457)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import compile_path

from hal.api.fastpath import NOT_JSON
from hal.core.errors import HalError
from hal.state.store import DatabaseUnavailable

# what a client is told to wait before retrying while the database is away
RETRY_AFTER_S = 5
# FastAPI's HTTPException detail for a body that is not UTF-8 (``fastapi.routing``)
FASTAPI_BODY_ERROR = "There was an error parsing the body"
NOT_UTF8 = "request: Invalid JSON: the body is not UTF-8 text; send the JSON encoded as UTF-8"

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


def field_path(parts: Iterable[object]) -> str | None:
    """A field as HAL's own errors name it: ``jobs[1].cpus_per_task``, ``environment.A``
    (pydantic's location ``("jobs", 1, "cpus_per_task")``); None for the whole request."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or None


def install(app: FastAPI) -> None:
    @app.exception_handler(HalError)
    async def _hal_error(_request: Request, err: HalError) -> JSONResponse:
        found = problem(err.http_status, err.code, err.message, err.field)
        if isinstance(err, DatabaseUnavailable):
            found.headers["Retry-After"] = str(RETRY_AFTER_S)
        return found

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, _err: ClientDisconnect) -> Response:
        # The client closed its connection before its body arrived (an agent or a command
        # killed mid-request): nobody reads an answer, and it is no server error (it was
        # logged as "Exception in ASGI application" with a traceback). 499 as nginx's.
        log.debug("client went away during %s %s", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(DBAPIError)
    async def _database(request: Request, err: DBAPIError) -> JSONResponse:
        # a store call made outside ``Cluster.db`` (a token's first look-up); those made
        # through it arrive as DatabaseUnavailable already
        unavailable = DatabaseUnavailable.of(err)
        if unavailable is not None:
            return await _hal_error(request, unavailable)
        log.error("database error on %s %s", request.method, request.url.path, exc_info=err)
        return problem(
            500,
            "internal_error",
            "the database refused the request: a bug in HAL; the server's log has the "
            "details (report them)",
        )

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        # Starlette's own refusals (no such route, wrong method) in the same shape
        path = request.url.path
        if err.status_code == 404:
            found = problem(404, "not_found", f"no such path {path}; /docs lists the API")
        elif err.status_code == 405:
            allowed = allowed_methods(request) or [
                m.strip() for m in (err.headers or {}).get("Allow", "").split(",") if m.strip()
            ]
            found = problem(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed on {path}; it takes {', '.join(allowed)} "
                "(/docs lists each path's methods)",
            )
            found.headers["Allow"] = ", ".join(allowed)
        elif err.status_code == 400 and err.detail == FASTAPI_BODY_ERROR:
            # FastAPI's answer to a body its JSON decoder could not even read as text
            found = problem(400, "invalid_request", NOT_UTF8)
        else:
            found = problem(err.status_code, "http_error", str(err.detail))
        headers = dict(err.headers or {})
        if err.status_code == 405:
            headers.pop("Allow", None)  # one route's methods (Starlette's); set above
        found.headers.update(headers)
        return found

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        if first.get("type") == "json_invalid":
            # FastAPI's loc is ("body", offset); pydantic's (the fast paths) is () and its
            # message says where ("... at line 1 column 42")
            loc = tuple(first.get("loc") or ())
            why = first.get("ctx", {}).get("error", "malformed")
            where = f" at character {loc[-1]}" if len(loc) > 1 else ""
            return problem(400, "invalid_request", f"request: Invalid JSON: {why}{where}")
        if tuple(first.get("loc", ())) == ("body",) and isinstance(first.get("input"), bytes):
            # FastAPI passes a body it did not parse as JSON on as bytes
            return problem(400, "invalid_request", NOT_JSON)
        field = field_path(p for p in first.get("loc", ()) if p not in ("body", "query", "path"))
        msg = str(first.get("msg", "invalid request"))
        count = len(err.errors())
        more = f" (and {count - 1} more problems)" if count > 1 else ""
        return problem(400, "invalid_request", f"{field or 'request'}: {msg}{more}", field)


def allowed_methods(request: Request) -> list[str]:
    """The methods the API documents for ``request``'s path, for a 405's ``Allow``:
    Starlette names only the first matching route's, and HAL has one route per method
    (``/v1/jobs/{job_id}`` answered OPTIONS with ``Allow: GET``, hiding PATCH and DELETE).
    Where templates overlap (``/v1/jobs/batch`` is also ``/v1/jobs/{job_id}``) the one
    with the fewest parameters is the resource, as the routes are declared. Empty for a
    path the document does not hold (``/metrics``, the dashboard's files)."""
    path = request.url.path
    found: list[tuple[int, list[str]]] = []
    for template, item in request.app.openapi()["paths"].items():
        regex, _format, params = compile_path(template)
        if regex.match(path):
            found.append((len(params), sorted(m.upper() for m in item if m.upper() in METHODS)))
    return min(found)[1] if found else []


METHODS = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}


# What every error answer of the API is (``problem``), for the OpenAPI document
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "An error (RFC 9457): `code` is stable for programs, `detail` says what "
    "to do, `field` names the part of the request at fault when there is one",
    "required": ["type", "title", "status", "code", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "code": {"type": "string"},
        "detail": {"type": "string"},
        "field": {"type": "string"},
    },
}
# The refusals any operation may answer besides 400, with what each means
REFUSALS = {
    "401": "no token, or one the server does not know",
    "403": "the token's user may not do this",
    "404": "no such job, node, user, ... or a plane this server does not run",
    "409": "the request conflicts with the current state (a job already ended, ...)",
    "413": "the request body is larger than the server accepts",
    "429": "too many requests of this user; wait as Retry-After says",
    "503": "the database is unavailable; retry after Retry-After seconds",
}


def document(openapi: dict[str, Any]) -> None:
    """Make ``openapi`` say what the server answers on errors: FastAPI documents a 422
    with its own body on each operation with parameters, but ``install`` answers bad input
    with 400 and every refusal as a Problem (problem+json). A client generated from the
    document, and the fuzzing run (tests/integration/server/fuzz), rely on it."""
    openapi.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    ref = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, item in openapi.get("paths", {}).items():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            if responses.pop("422", None) is not None:
                responses["400"] = {"description": "the request is invalid", "content": ref}
            if path.startswith("/v1/"):
                for status, why in REFUSALS.items():
                    responses.setdefault(status, {"description": why, "content": ref})
    schemas = openapi["components"]["schemas"]
    in_use = str(openapi["paths"])
    for name in ("HTTPValidationError", "ValidationError"):
        if f"/{name}'" not in in_use:
            schemas.pop(name, None)
