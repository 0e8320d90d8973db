"""A small keep-alive HTTP/1.1 client on plain sockets.

The SDK sits on the path of every ``hal sbatch``: a CLI process imports it, sends one or
two requests and exits. httpx costs ~100 ms of imports there and even ``http.client``
~30 ms (it parses headers with the ``email`` package), more than the request itself, so
requests go over a socket with the little HTTP/1.1 the server needs (Content-Length or
chunked bodies, keep-alive). The event stream, which is long-lived, uses ``http.client``.

Plain HTTP goes over ``_socket``, the C module under ``socket``: ``socket.py`` adds
``selectors`` and its address families as enums, about a quarter of a bare interpreter's
start, and nothing here needs them. HTTPS (``ssl`` wraps ``socket.socket`` objects) loads
``socket`` where it is used.
"""

from __future__ import annotations

import _socket

TYPE_CHECKING = False  # (nor ``typing`` nor ``dataclasses``: see ``hal.client``)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

# ``urllib.parse`` (with ``ipaddress``, which it imports) costs a short command about a
# fifth of a bare interpreter's start, more than its request. The URL HAL is given is
# nearly always plain (http://HOST:PORT): ``split_url`` reads that one as urlsplit does
# and hands any other to it; ``percent_encoded`` is quote(safe=""), three lines.
_HOST_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
_ASCII_DIGITS = frozenset("0123456789")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def split_url(url: str) -> tuple[str, str | None, int | None, str]:
    """(scheme, host, port, path) as ``urllib.parse.urlsplit`` reads them; a port out of
    range or not a number raises its ValueError."""
    plain = _plain_url(url)
    if plain and int(plain[2] or 0) <= 65535:
        scheme, host, port, path = plain
        return scheme, host.lower(), int(port) if port else None, path
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port, parts.path


def _plain_url(url: str) -> tuple[str, str, str, str] | None:
    r"""(scheme, host, port, path) of ``http[s]://HOST[:PORT][/PATH]``, the host ASCII
    letters, digits, ``.`` and ``-``, the port 1 to 5 ASCII digits, no query or fragment
    (a ``re.fullmatch`` of ``(https?)://([A-Za-z0-9.-]+)(?::([0-9]{1,5}))?(/[^?#]*)?``,
    without ``re``: the start-up of every command); None for any other URL."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("http", "https") or not sep:
        return None
    authority, slash, path = rest.partition("/")
    host, colon, port = authority.partition(":")
    if not host or not _HOST_CHARS.issuperset(host):
        return None
    if colon and not (0 < len(port) <= 5 and _ASCII_DIGITS.issuperset(port)):
        return None
    if "?" in path or "#" in path:
        return None
    return scheme, host, port, slash + path


def percent_encoded(text: str) -> str:
    """``urllib.parse.quote(text, safe="")``: each byte of ``text``'s UTF-8 but
    ``A-Za-z0-9_.-~`` as ``%XX``."""
    if _UNRESERVED.issuperset(text):
        return text
    return "".join(
        ch if ch in _UNRESERVED else "".join(f"%{byte:02X}" for byte in ch.encode()) for ch in text
    )


class TransportError(Exception):
    """The server could not be reached or the connection broke. ``sent``: the request
    went out and its answer was lost (the server may have acted on it)."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class TlsRefused(TransportError):
    """The TLS handshake failed (a certificate this client does not trust, one for
    another name, an expired one); the message says what to do."""


class Response:
    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers  # names in lower case
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Transport:
    """One server's connection. ``connect_timeout``: the most a connect may wait, where
    it must be less than a request's limit (one of several servers: the next may lead)."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        connect_timeout: float | None = None,
    ) -> None:
        scheme, host, port, path = split_url(base_url)
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {base_url!r}: use http:// or https://")
        if not host:
            raise ValueError(f"no host in {base_url!r}")
        self.https = scheme == "https"
        self.host = host
        self.port = port or (443 if self.https else 80)
        self.prefix = path.rstrip("/")
        self.headers = headers
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._sock: Any = None
        self._buf = b""
        self._context: Any = None  # the TLS context, for https

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf = b""

    def _open(self, timeout: float) -> Any:
        if self.connect_timeout is not None:
            timeout = min(timeout, self.connect_timeout)
        # getaddrinfo encodes a str host with the "idna" codec, whose import (stringprep,
        # unicodedata) costs a short command more than its connect: an ASCII name goes as
        # bytes (and one idna refuses, "a..b", is then the resolver's error, an OSError).
        # (typeshed types the host as str; create_connection hands it to getaddrinfo.)
        host = self.host.encode() if self.host.isascii() else self.host
        if self.https:
            import socket

            raw = socket.create_connection((host, self.port), timeout=timeout)  # type: ignore[arg-type]
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                return self._tls().wrap_socket(raw, server_hostname=self.host)
            except OSError as err:
                raw.close()
                raise self._refused(err) from err
        sock = _connect(host, self.port, timeout)
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        return sock

    def _tls(self) -> Any:
        """The TLS context (``hal.host.tls.client_context``: the system's CAs and
        HAL_CA_FILE), made once per transport."""
        if self._context is None:
            from hal.host.tls import TlsSetupError, client_context

            try:
                self._context = client_context()
            except TlsSetupError as err:
                raise TlsRefused(str(err)) from None
        return self._context

    def _refused(self, err: OSError) -> OSError | TransportError:
        """A failed handshake as what it means (``TlsRefused``); any other error as is."""
        from hal.host.tls import explain

        why = explain(err, self.host)
        return err if why is None else TlsRefused(why)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Send one request and read its answer. ``timeout``: this request's limit on the
        connect and on each send and read (default ``self.timeout``), on a fresh or a
        kept-alive connection alike; the connection goes back to ``self.timeout`` after,
        so a short limit never outlives its request."""
        limit = self.timeout if timeout is None else timeout
        url = self.prefix + path + ("?" + _query(params) if params else "")
        head = [f"{method} {url} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [
            f"{k}: {v}" for k, v in (self.headers | headers if headers else self.headers).items()
        ]
        head.append(f"Content-Length: {len(body or b'')}")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        # A kept-alive connection the server closed while idle (its keep-alive timeout) is
        # seen before sending, so nothing goes out on it. A connection that breaks after
        # the request went out is ambiguous: the server may have read the request and
        # died before answering, so it is sent once more only where acting twice changes
        # nothing (see ``replayable``), or where not all of it went out. A fresh
        # connection that fails, or a timeout, is the server's trouble, not a stale socket.
        resendable = replayable(method, params, headers)
        sent = False  # once out, it stays out: the server may have read it
        for attempt in (0, 1):
            if self._sock is not None and _readable(self._sock):
                self.close()  # EOF or a reset: a server answers nothing unasked
            fresh = self._sock is None
            try:
                if fresh:
                    self._sock = self._open(limit)
                self._sock.settimeout(limit)
                self._sock.sendall(payload)
                sent = True
                response = self._read_response(method)
                if self._sock is not None:
                    self._sock.settimeout(self.timeout)
                return response
            except TlsRefused:
                self.close()
                raise  # no second try mends a certificate
            except (OSError, TransportError) as err:
                self.close()
                stale = attempt == 0 and not fresh and not isinstance(err, TimeoutError)
                if not (stale and (resendable or not sent)):
                    message = str(err) or err.__class__.__name__
                    raise TransportError(message, sent=sent) from err
        raise AssertionError("unreachable")

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise TransportError("connection closed by the server")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(marker)
        return line

    def _read_exact(self, size: int) -> bytes:
        if len(self._buf) >= size:
            data, self._buf = self._buf[:size], self._buf[size:]
            return data
        # received into one buffer of its size: adding each chunk to the bytes read so
        # far copies them all again (a job list of 20 MB: hundreds of chunks)
        whole = bytearray(size)
        view = memoryview(whole)
        have = len(self._buf)
        view[:have], self._buf = self._buf, b""
        while have < size:
            got = self._sock.recv_into(view[have:], size - have)
            if not got:
                raise TransportError("connection closed in the middle of a response")
            have += got
        return bytes(whole)

    def _read_response(self, method: str) -> Response:
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        status_line, *lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise TransportError(f"not an HTTP response: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        for line in lines:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        status = int(parts[1])
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = self._read_chunked()
        elif "content-length" in headers:
            body = self._read_exact(int(headers["content-length"]))
        else:  # body until the server closes
            while chunk := self._sock.recv(65536):
                self._buf += chunk
            body, self._buf = self._buf, b""
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, parts[2] if len(parts) > 2 else "", headers, body)

    def _read_chunked(self) -> bytes:
        out: list[bytes] = []
        while True:
            size = int(self._read_until(b"\r\n").split(b";")[0], 16)
            if size == 0:
                self._read_until(b"\r\n")  # no trailers from our server
                return b"".join(out)
            out.append(self._read_exact(size))
            self._read_exact(2)

    def open_stream(self, path: str, params: dict[str, str]) -> Iterator[str]:
        """GET ``path`` as server-sent events: send it and read the answer's head now
        (``StreamRefused`` for one that is no stream, 3xx and up: a standby's redirect
        included), then yield its lines as they arrive."""
        import http.client

        conn: http.client.HTTPConnection
        if self.https:
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout, context=self._tls()
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            url = self.prefix + path + "?" + _query(params)
            conn.request("GET", url, headers={**self.headers, "Accept": "text/event-stream"})
            if conn.sock is not None:
                conn.sock.settimeout(None)  # (connected: the stream waits for events)
            raw = conn.getresponse()
            if raw.status >= 300:
                data = raw.read()
                headers = {k.lower(): v for k, v in raw.getheaders()}
                raise StreamRefused(Response(raw.status, raw.reason, headers, data))
        except BaseException as err:
            conn.close()
            broken = self._broken(err)
            if broken is err:
                raise
            raise broken from err
        return self._lines(conn, raw)

    def _lines(self, conn: Any, raw: Any) -> Iterator[str]:
        try:
            while True:
                line = raw.readline()
                if not line:
                    return
                yield line.decode("utf-8", "replace").rstrip("\r\n")
        except BaseException as err:
            broken = self._broken(err)
            if broken is err:
                raise
            raise broken from err
        finally:
            conn.close()

    def _broken(self, err: BaseException) -> BaseException:
        """A stream's failure as a ``TransportError`` (a refused handshake as
        ``TlsRefused``); anything that is no network error as is."""
        import http.client

        if isinstance(err, OSError):
            refused = self._refused(err)
            if isinstance(refused, TlsRefused):
                return refused
            return TransportError(str(err) or err.__class__.__name__)
        if isinstance(err, http.client.HTTPException):
            return TransportError(str(err) or err.__class__.__name__)
        return err


def _connect(host: str | bytes, port: int, timeout: float) -> _socket.socket:
    """``socket.create_connection((host, port), timeout)`` on ``_socket``: each address
    the resolver gives, in its order, until one connects; else the last one's error."""
    error: OSError = OSError("getaddrinfo returns an empty list")
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = None
        try:
            sock = _socket.socket(family, kind, proto)
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as err:
            error = err
            if sock is not None:
                sock.close()
    raise error


def replayable(method: str, params: dict[str, str] | None, headers: dict[str, str] | None) -> bool:
    """Whether sending the request twice does what sending it once does (RFC 9110
    §9.2.2), so that it may be resent when its answer is lost: reads, PUT, a plain DELETE
    (a second cancel of a cancelled job changes nothing), and a request with an
    ``Idempotency-Key`` (the server answers its resend with the first's outcome). Not a
    DELETE with a query: ``?signal=`` sends a signal each time. Not POST or PATCH."""
    if headers and "Idempotency-Key" in headers:
        return True
    if method == "DELETE":
        return not params
    return method in ("GET", "HEAD", "OPTIONS", "PUT")


def _readable(sock: Any) -> bool:
    """Whether an idle kept-alive connection has something to read: the server closed
    or reset it (what urllib3 checks before reusing a pooled connection). ``poll``, not
    ``select``: an application holding 1,024 descriptors gets sockets ``select`` refuses."""
    import select  # (a kept-alive connection's: sbatch's one request never asks)

    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _query(params: dict[str, str]) -> str:
    return "&".join(f"{percent_encoded(k)}={percent_encoded(v)}" for k, v in params.items())


class StreamRefused(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response
