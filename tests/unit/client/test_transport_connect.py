"""The client connects over ``_socket`` (``socket.py`` costs ``sbatch`` a quarter of a bare
interpreter's start): it must connect as ``socket.create_connection`` does, each address
the resolver gives in turn, the last one's error when none answers."""

from __future__ import annotations

import _socket
import socket
from collections.abc import Iterator

import pytest

from hal.client import transport
from hal.client.transport import Transport

Address = tuple[int, int, int, str, tuple[str, int]]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port: int = server.getsockname()[1]
    return port


def resolving_to(monkeypatch: pytest.MonkeyPatch, *ports: int) -> list[object]:
    """The resolver answers one IPv4 address per port, in this order; returns the
    hosts it was asked for."""
    asked: list[object] = []

    def getaddrinfo(host: object, port: object, *_: object) -> list[Address]:
        asked.append(host)
        stream = (_socket.AF_INET, _socket.SOCK_STREAM, _socket.IPPROTO_TCP, "")
        return [(*stream, ("127.0.0.1", p)) for p in ports]

    monkeypatch.setattr(transport._socket, "getaddrinfo", getaddrinfo)
    return asked


def test_the_next_address_is_tried_when_one_refuses(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = listener.getsockname()[1]
    asked = resolving_to(monkeypatch, closed_port(), port)
    sock = transport._connect(b"head-1", 8470, 5.0)
    try:
        assert sock.getpeername() == ("127.0.0.1", port)
        assert sock.gettimeout() == 5.0
    finally:
        sock.close()
    assert asked == [b"head-1"]


def test_the_last_refusal_is_raised_when_no_address_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolving_to(monkeypatch, closed_port(), closed_port())
    with pytest.raises(ConnectionRefusedError) as raised:
        transport._connect("head-1", 8470, 5.0)
    assert raised.value.errno is not None


def test_a_resolver_without_addresses_is_an_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    resolving_to(monkeypatch)
    with pytest.raises(OSError, match="getaddrinfo returns an empty list"):
        transport._connect("head-1", 8470, 5.0)


def test_a_request_goes_over_a_plain_c_socket_with_nodelay(listener: socket.socket) -> None:
    client = Transport(f"http://127.0.0.1:{listener.getsockname()[1]}", {}, timeout=5.0)
    try:
        sock = client._open(5.0)
        assert type(sock) is _socket.socket
        assert sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY) != 0
        sock.close()
    finally:
        client.close()
