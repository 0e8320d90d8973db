"""Hot endpoints without FastAPI's per-request machinery.

Agents sync hundreds of times a second and ``sbatch`` submits one job per request. For
those, FastAPI's body parsing (parse, then validate the Python objects), response
validation and ``jsonable_encoder`` cost more than the work itself, so the handlers read
the raw body, validate it straight from JSON bytes with a cached pydantic ``TypeAdapter``,
and return the serialised answer as a ``Response``. OpenAPI still documents the schemas
(``body_schema``), and validation errors take the same problem+json path as elsewhere.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from hal.core.errors import InvalidRequest

T = TypeVar("T")


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    found = _ADAPTERS.get(cls)
    if found is None:
        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


def add_schemas(openapi: dict[str, Any], classes: list[type[Any]]) -> None:
    """Put the schemas of bodies read by ``read_body`` into an OpenAPI document."""
    schemas = openapi.setdefault("components", {}).setdefault("schemas", {})
    for cls in classes:
        doc = _adapter(cls).json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in doc.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas.setdefault(cls.__name__, doc)


def is_json(request: Request) -> bool:
    """Whether the body is declared JSON (``application/json`` or ``application/*+json``,
    any parameters): FastAPI's rule for the bodies it parses, so every route refuses the
    same requests (``curl -d`` without ``-H 'Content-Type: application/json'`` sends a
    form)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


NOT_JSON = "request: the body was not read as JSON; send it with 'Content-Type: application/json'"


def not_json() -> InvalidRequest:
    return InvalidRequest(NOT_JSON)


async def read_body(request: Request, cls: type[T]) -> T:
    if not is_json(request):
        raise not_json()
    try:
        value: T = _adapter(cls).validate_json(await request.body())
    except ValidationError as err:
        raise RequestValidationError(err.errors()) from err
    return value


def validate(cls: type[T], value: object) -> T:
    """``value`` (Python objects: a body another edge translated, as the slurmrestd
    facade's ``job_desc_msg``) validated with the adapter ``read_body`` uses, so its
    bounds apply the same way; raises pydantic's ``ValidationError``."""
    found: T = _adapter(cls).validate_python(value)
    return found


def json_response(value: Any, status_code: int = 200) -> Response:
    body = _adapter(type(value)).dump_json(value)
    return Response(body, status_code=status_code, media_type="application/json")


def body_schema(name: str) -> dict[str, Any]:
    """``openapi_extra`` that documents a request body read by ``read_body``."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
        }
    }
