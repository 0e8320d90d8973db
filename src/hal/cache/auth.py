"""The data plane's shared token: the cache control plane refuses requests without it,
and cache nodes and the HAL server send it (``Authorization: Bearer``).

One token for the site's data plane, configured on both sides: ``HAL_CACHE_TOKEN``, or
``--token-file`` of ``hal cache control-plane`` and ``hal cache node``. Unset: no token
asked, as before (a control plane on loopback, tests).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from hal.core.errors import InvalidRequest

TOKEN_ENV = "HAL_CACHE_TOKEN"


def cache_token(token_file: str | None = None) -> str | None:
    """``token_file``'s content, else ``HAL_CACHE_TOKEN``; None when neither is set."""
    if token_file:
        try:
            text = Path(token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not text"
            raise InvalidRequest(
                f"cannot read --token-file {token_file} ({reason}); write the data plane's "
                "token there, readable by this service's user only",
                field="token_file",
            ) from None
        if not text:
            raise InvalidRequest(f"--token-file {token_file} is empty", field="token_file")
        return text
    return os.environ.get(TOKEN_ENV, "").strip() or None


def auth_headers(token: str | None = None) -> dict[str, str]:
    token = token or cache_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def token_refusal(expected: str | None, authorization: bytes | None) -> str | None:
    """Why a request with ``authorization`` is refused; None when it may pass."""
    if expected is None:
        return None
    if not authorization:
        return (
            "missing token: this cache control plane takes the data plane's token "
            "(Authorization: Bearer); give cache nodes and the HAL server the same "
            f"{TOKEN_ENV} (or --token-file) as the control plane"
        )
    scheme, _, given = authorization.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), expected):
        return (
            "wrong token: this is not the token the cache control plane was given; use the "
            f"same {TOKEN_ENV} (or --token-file) on both sides"
        )
    return None
