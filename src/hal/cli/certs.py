"""``hal certs init|issue``: a small CA and its certificates, for a site without one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_DIR = "hal-certs"


def add_commands(sub: Any) -> None:
    certs = sub.add_parser(
        "certs", help="make a small CA and TLS certificates (docs/admin/security.md)"
    )
    csub = certs.add_subparsers(metavar="COMMAND")
    init = csub.add_parser("init", help="make a CA: DIR/ca.pem (trust it) and DIR/ca.key")
    init.add_argument("--dir", default=DEFAULT_DIR, help="where to write (default %(default)s)")
    init.add_argument("--name", default="HAL site CA", help="the CA's common name")
    init.set_defaults(func=cmd_init)

    iss = csub.add_parser("issue", help="make DIR/NAME.pem and DIR/NAME.key signed by the CA")
    iss.add_argument("name", help="the host's name (a client certificate: the node's name)")
    iss.add_argument("--dir", default=DEFAULT_DIR, help="the CA's folder (default %(default)s)")
    iss.add_argument(
        "--dns", action="append", default=[], metavar="HOST", help="a DNS name (repeatable)"
    )
    iss.add_argument(
        "--ip", action="append", default=[], metavar="ADDR", help="an IP address (repeatable)"
    )
    iss.add_argument(
        "--client",
        action="store_true",
        help="a client certificate (an agent's, for mutual TLS) proving NAME",
    )
    iss.add_argument("--days", type=int, default=825, help="valid this long (default 825)")
    iss.set_defaults(func=cmd_issue)


def cmd_init(ns: argparse.Namespace) -> int:
    from hal.host.certs import init_ca

    path = init_ca(Path(ns.dir), name=ns.name)
    print(f"CA certificate {path} (give it to clients: --ca-file or HAL_CA_FILE)")
    print(f"CA key {path.with_suffix('.key')} (mode 0600; keep it off the cluster's nodes)")
    return 0


def cmd_issue(ns: argparse.Namespace) -> int:
    from hal.core.errors import InvalidRequest
    from hal.host.certs import issue

    if ns.days < 1:
        raise InvalidRequest("--days: at least 1", field="days")
    cert, key = issue(Path(ns.dir), ns.name, dns=ns.dns, ips=ns.ip, client=ns.client, days=ns.days)
    kind = "client" if ns.client else "server"
    print(f"{kind} certificate {cert}")
    print(f"key {key} (mode 0600)")
    return 0
