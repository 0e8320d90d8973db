"""Errors of the cache control plane, as the HAL cache API names them.

The cache API's error codes are fixed by its contract (``bad_request``, ``not_found``,
``already_exists``, ``internal_error``), so they get their own leaves under the HAL tree::

    HalError
     ├── InvalidRequest
     │    └── CacheBadRequest   400 bad_request
     ├── NotFound
     │    └── CacheNotFound     404 not_found
     └── Conflict
          └── AlreadyExists     409 already_exists

Anything else escaping a handler is a bug and becomes 500 ``internal_error``.
"""

from __future__ import annotations

from typing import Any

from hal.core.errors import Conflict, InvalidRequest, NotFound


class CacheBadRequest(InvalidRequest):
    code = "bad_request"

    def __init__(
        self, message: str, *, field: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.details = details


class CacheNotFound(NotFound):
    code = "not_found"


class AlreadyExists(Conflict):
    code = "already_exists"
