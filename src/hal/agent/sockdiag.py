"""The host's TCP sockets and their byte counters, from the kernel's sock_diag.

One dump per address family (netlink ``NETLINK_SOCK_DIAG``, ``SOCK_DIAG_BY_FAMILY``)
through pyroute2's ``DiagSocket.get_sock_stats``, asking for ``INET_DIAG_INFO``: each
socket's addresses, inode and cookie (unique per socket until the host reboots), and,
decoded only for the sockets asked about, its ``struct tcp_info`` counters
``tcpi_bytes_acked`` (bytes sent and acknowledged by the peer) and
``tcpi_bytes_received`` (Linux 4.2 and later; an older kernel's read 0). The counters
are cumulative for the socket's life and vanish with it; the kernel counts a SYN and a
FIN as one byte acknowledged each.

What it sees: every TCP socket of the agent's network namespace, IPv4 and IPv6,
loopback included, connected (``SS_CONN``: established, closing, SYN sent) or
listening, whatever user holds it; no privilege is needed for that. Not another
namespace's sockets, nor traffic that never was TCP through this kernel (RDMA, UDP).

A ``DiagSocket`` is made and closed per read: pyroute2 (0.9) ties a socket to the
thread that made it, and the agent reads from asyncio's worker threads, any of them.
pyroute2 is imported on the first read, so an agent that never reads does not load it.
"""

from __future__ import annotations

import socket
from collections.abc import Container
from typing import Any, NamedTuple

INET_DIAG_INFO_BIT = 1 << (2 - 1)  # ``idiag_ext`` bit of INET_DIAG_INFO (2): tcp_info
TCP_LISTEN = 10  # ``idiag_state`` of a listening socket (the kernel's TCP_LISTEN)


class SockDiagUnavailable(Exception):
    """sock_diag cannot be read here: not Linux, no pyroute2, a kernel or a sandbox
    (seccomp, a container) that refuses the netlink family, or a reply that would not
    decode. The message says which."""


class TcpSocket(NamedTuple):
    """One TCP socket as sock_diag shows it. Addresses are text (``inet_ntop``), an
    IPv4-mapped IPv6 address (``::ffff:10.0.0.1``, a dual-stack socket's IPv4 peer)
    written as the IPv4 address it maps, so both ends of a connection name it alike."""

    inode: int
    cookie: int
    listening: bool
    local: tuple[str, int]
    remote: tuple[str, int]
    bytes_acked: int  # 0 for a listener
    bytes_received: int


def tcp_sockets(inodes: Container[int]) -> list[TcpSocket]:
    """The host's connected and listening TCP sockets whose inode is in ``inodes`` (a
    socket with no inode, an orphan closing, is nobody's). Raises
    ``SockDiagUnavailable``."""
    try:
        from pyroute2.netlink.diag import SS_CONN, SS_LISTEN, DiagSocket
    except ImportError as err:
        raise SockDiagUnavailable(f"pyroute2 is not installed: {err}") from err
    found: list[TcpSocket] = []
    # pyroute2 raises its own exceptions (NetlinkError, NetlinkDecodeError, ...) beside
    # OSError: any of them means no reading this time, which the caller decides about
    try:
        with DiagSocket() as diag:
            diag.bind()
            for family in (socket.AF_INET, socket.AF_INET6):
                replies = diag.get_sock_stats(
                    family=family,
                    states=SS_CONN | (1 << SS_LISTEN),
                    protocol=socket.IPPROTO_TCP,
                    extensions=INET_DIAG_INFO_BIT,
                )
                for message in replies:
                    inode = message["idiag_inode"]
                    if inode and inode in inodes:
                        found.append(_socket(message, inode))
    except Exception as err:
        raise SockDiagUnavailable(f"sock_diag: {type(err).__name__}: {err}") from err
    return found


def _socket(message: Any, inode: int) -> TcpSocket:
    """A decoded ``inet_diag_msg`` (pyroute2's, untyped) as a ``TcpSocket``."""
    get = message.__getitem__
    listening = get("idiag_state") == TCP_LISTEN
    acked = received = 0
    if not listening:
        info = message.get_attr("INET_DIAG_INFO")
        if info is not None:
            acked = int(info.get("tcpi_bytes_acked") or 0)
            received = int(info.get("tcpi_bytes_received") or 0)
    return TcpSocket(
        inode=inode,
        cookie=int(get("idiag_cookie")),
        listening=listening,
        local=(plain_address(get("idiag_src")), int(get("idiag_sport"))),
        remote=(plain_address(get("idiag_dst")), int(get("idiag_dport"))),
        bytes_acked=acked,
        bytes_received=received,
    )


def plain_address(text: str) -> str:
    """``::ffff:10.0.0.1`` → ``10.0.0.1``; any other address as it is."""
    if text.startswith("::ffff:") and "." in text:
        return text[7:]
    return text
