"""Where the server is and who we are.

The URL comes from ``HAL_URL``, else the local default ``http://127.0.0.1:8470``; a site
that runs standby servers lists them all, comma-separated (``HAL_URL=https://a:8470,
https://b:8470``: ``hal.client.servers`` finds the leader among them). The token comes
from ``HAL_TOKEN``, else from the credentials file ``~/.config/hal/credentials.json``
(``{"<url>": {"user": ..., "token": ...}}``), which ``hal up`` and ``hal login`` write,
stored under any of the listed addresses (the first found wins: the servers of one site
share their users and tokens); a URL on this machine's loopback (127.0.0.1, localhost,
[::1]) finds the token stored under any of those names with the same port.
"""

from __future__ import annotations

import os

from hal.client import cjson
from hal.core.errors import InvalidRequest

TYPE_CHECKING = False  # (``pathlib`` only where a Path is asked for: see ``hal.client``)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

DEFAULT_PORT = 8470


def default_server_url() -> str:
    """``HAL_URL``; unset or empty (``export HAL_URL=``) the local default, as an empty
    ``HAL_TOKEN`` or ``HAL_RETRY_SECONDS`` means theirs."""
    url = os.environ.get("HAL_URL", "").strip() or f"http://127.0.0.1:{DEFAULT_PORT}"
    return url.rstrip("/")


def credentials_path() -> Path:
    from pathlib import Path

    return Path(_credentials_file())


def _credentials_file() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "hal", "credentials.json")


RETRY_SECONDS = 60.0
TIMEOUT_SECONDS = 30.0  # a request's wait for its answer (HAL_TIMEOUT_SECONDS)


class ClientConfig:
    """``retry_seconds``: how long a request waits out a server whose database is away
    (503 database_unavailable: nothing was applied, so sending it again is safe), as
    Slurm's clients wait for a controller that does not answer; HAL_RETRY_SECONDS, 0 =
    never."""

    __slots__ = ("retry_seconds", "timeout_seconds", "token", "url")

    # ``url``: one address, or several comma-separated (``urls``: them one by one)

    def __init__(
        self,
        url: str,
        token: str | None,
        timeout_seconds: float = TIMEOUT_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.url = url
        self.token = token
        self.timeout_seconds = timeout_seconds
        self.retry_seconds = retry_seconds

    @property
    def urls(self) -> tuple[str, ...]:
        """The server addresses, in their order (one unless HAL_URL lists several)."""
        if "," not in self.url:
            return (self.url,)
        from hal.client.servers import server_urls

        return server_urls(self.url) or (self.url,)

    def __repr__(self) -> str:  # (never the token)
        return (
            f"ClientConfig(url={self.url!r}, timeout_seconds={self.timeout_seconds}, "
            f"retry_seconds={self.retry_seconds})"
        )


def load_client_config(url: str | None = None, token: str | None = None) -> ClientConfig:
    """``url``: one address or several, comma-separated (default HAL_URL)."""
    url = (url or default_server_url()).rstrip("/")
    if "," in url:  # (a list: the one address of nearly every site is left as given)
        from hal.client.servers import server_urls

        url = ",".join(server_urls(url)) or default_server_url()
    token = token or os.environ.get("HAL_TOKEN") or _stored_token(url)
    return ClientConfig(
        url=url, token=token, timeout_seconds=_timeout_seconds(), retry_seconds=_retry_seconds()
    )


def _retry_seconds() -> float:
    return env_seconds("HAL_RETRY_SECONDS", RETRY_SECONDS, "0: never retry")


def _timeout_seconds() -> float:
    """HAL_TIMEOUT_SECONDS: how long a request waits for the server's answer (a busy
    server's answer of a whole history, ``sacct`` of 100,000 jobs, can take longer than
    the default)."""
    what = "how long a request waits for its answer, more than 0"
    seconds = env_seconds("HAL_TIMEOUT_SECONDS", TIMEOUT_SECONDS, what)
    if seconds == 0:
        raise InvalidRequest(
            f"HAL_TIMEOUT_SECONDS=0 is not allowed ({what})", field="HAL_TIMEOUT_SECONDS"
        )
    return seconds


def env_seconds(name: str, default: float, what: str) -> float:
    """The environment variable ``name``, a number of seconds >= 0 (``default`` when
    unset or empty); anything else is refused saying ``what`` it is for."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise InvalidRequest(
            f"{name}={text!r} is not a number of seconds >= 0 ({what})", field=name
        )
    return value


def _stored_token(url: str) -> str | None:
    """The token stored for ``url``, or for the first of its addresses that has one."""
    try:
        with open(_credentials_file(), "rb") as f:
            data = cjson.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    for address in url.split(","):
        for name in _names_of(address):
            entry = data.get(name)
            if isinstance(entry, dict) and isinstance(entry.get("token"), str):
                return str(entry["token"])
    return None


_LOOPBACK = {"127.0.0.1": "127.0.0.1", "localhost": "localhost", "::1": "[::1]"}


def _names_of(url: str) -> Iterator[str]:
    """``url``, then the same server under this machine's other loopback names: `hal up`
    stores its token for http://127.0.0.1:8470, and HAL_URL=http://localhost:8470 found
    none ("missing token"). (A generator: where ``url`` itself is stored, its URL is
    never parsed.)"""
    yield url
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not a port: the request will say so
        return
    if parts.hostname not in _LOOPBACK:
        return
    for host, name in _LOOPBACK.items():
        if host != parts.hostname:
            yield urlunsplit(parts._replace(netloc=name + port))


def store_token(url: str, user: str, token: str) -> Path:
    """Remember ``token`` for ``url``, for each address of a comma-separated list (file
    mode 0600)."""
    path = credentials_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _unwritable(path, err) from None
    try:
        data = cjson.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    for address in url.split(","):
        if address.strip():
            data[address.strip().rstrip("/")] = {"user": user, "token": token}
    tmp = path.with_suffix(".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # the mode is only given to a new file: one left behind keeps its own
        with os.fdopen(fd, "w") as f:
            import json

            json.dump(data, f, indent=2)
        tmp.replace(path)
    except OSError as err:
        raise _unwritable(path, err) from None
    return path


def _unwritable(path: Path, err: OSError) -> InvalidRequest:
    return InvalidRequest(
        f"cannot write the token to {path}: {err.strerror}; set XDG_CONFIG_HOME (or HOME) "
        "to a directory this user may write",
        field="XDG_CONFIG_HOME",
    )
