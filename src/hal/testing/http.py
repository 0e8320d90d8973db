"""httpx's one-call functions (``httpx.get`` and the like) for tests and benchmarks.

``httpx.get(url)`` makes a client for the one request, and a client made with httpx's
default ``verify`` loads certifi's CA bundle into a new SSL context: about 28 ms of CPU
per call against 0.7 ms through this module, even for a plain-HTTP URL that never
uses it. A test polling a server's ``/healthz`` or ``/metrics`` twenty times a second
spent about half a core on it (docs/development.md). These take the same arguments and
send the same request, but verify as HAL's own clients do
(``hal.host.tls.verify_for``): for plain HTTP the system store is read only should the
request be sent on to https. An explicit ``verify=`` is used as given.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from hal.host.tls import verify_for


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("verify", verify_for(url))
    return httpx.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)


def put(url: str, **kwargs: Any) -> httpx.Response:
    return request("PUT", url, **kwargs)


def patch(url: str, **kwargs: Any) -> httpx.Response:
    return request("PATCH", url, **kwargs)


def delete(url: str, **kwargs: Any) -> httpx.Response:
    return request("DELETE", url, **kwargs)


@contextmanager
def stream(method: str, url: str, **kwargs: Any) -> Iterator[httpx.Response]:
    kwargs.setdefault("verify", verify_for(url))
    with httpx.stream(method, url, **kwargs) as response:
        yield response
