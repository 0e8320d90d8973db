"""``hal logs JOB [--follow]``, ``hal alerts``, and the logging options of ``hal up`` and
``hal server`` (``--log-level``, ``--log-format``: JSON lines by default)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import httpx

from hal.client.config import load_client_config
from hal.client.problems import error_from_response
from hal.core.errors import Unavailable


def add_commands(sub: Any) -> None:
    p = sub.add_parser("logs", help="print a job's stdout/stderr (--follow streams it)")
    p.add_argument("job", help="job id (123 or 100_7)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing while it runs")
    p.add_argument("--stderr", action="store_true", help="the job's stderr file instead")
    p.add_argument("--tail", type=int, default=None, metavar="BYTES", help="only the last BYTES")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("alerts", help="alerts the control plane has firing")
    p.add_argument("--all", action="store_true", help="recently resolved ones too")
    p.set_defaults(func=cmd_alerts)


def add_logging_options(parser: argparse.ArgumentParser, *, console: bool = False) -> None:
    """``--log-level``/``--log-format`` for a server command, configured before it runs.
    ``console``: the command runs in someone's terminal (``hal up``), so logs default to
    the readable format there unless HAL_LOG_FORMAT or the flag says otherwise."""
    parser.add_argument(
        "--log-level", default=None, choices=["debug", "info", "warning", "error"],
        help="log level (default HAL_LOG_LEVEL or info)",
    )  # fmt: skip
    parser.add_argument(
        "--log-format", default=None, choices=["json", "console"],
        help="json lines on stdout (default; HAL_LOG_FORMAT) or a readable console format",
    )  # fmt: skip
    command: Callable[[argparse.Namespace], int] = parser.get_default("func")

    def run(ns: argparse.Namespace) -> int:
        from hal.observe.config import ObserveConfig
        from hal.observe.logging import configure_logging

        env = ObserveConfig.from_env()
        fmt = ns.log_format or (
            env.log_format if "HAL_LOG_FORMAT" in os.environ or not console else "console"
        )
        configure_logging(ns.log_level or env.log_level, fmt)
        return command(ns)

    parser.set_defaults(func=run)


def _client() -> httpx.Client:
    """An httpx client for the streamed reads (``hal logs -f``), at the leader where
    HAL_URL lists several servers (found by the SDK's rules)."""
    cfg = load_client_config()
    headers = {"Authorization": f"Bearer {cfg.token}"} if cfg.token else {}
    from hal.host.tls import verify_for

    url = cfg.url
    if len(cfg.urls) > 1:
        from hal.client import HalClient

        with HalClient(config=cfg) as hal:
            url = hal.leader_url()
    return httpx.Client(
        base_url=url,
        headers=headers,
        timeout=httpx.Timeout(30, read=None),
        verify=verify_for(url),  # HAL_CA_FILE
    )


def _raise_for(response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise error_from_response(response)  # the SDK's mapping: same codes, same fields


def cmd_logs(ns: argparse.Namespace) -> int:
    params: dict[str, str | int] = {"stream": "stderr" if ns.stderr else "stdout"}
    if ns.follow:
        params["follow"] = "true"
    if ns.tail is not None:
        params["tail_bytes"] = ns.tail
    out = sys.stdout.buffer
    received = False
    try:
        with _client() as http, http.stream("GET", f"/v1/jobs/{ns.job}/output", params=params) as r:
            if r.status_code >= 400:
                r.read()
                _raise_for(r)
            for chunk in r.iter_bytes():
                received = True
                out.write(chunk)
                out.flush()
    except httpx.TransportError as err:
        if received:  # the server gave up mid-stream (the job's agent stopped answering)
            raise Unavailable(
                f"the output of job {ns.job} broke off ({err.__class__.__name__}): its node's "
                f"agent or the server stopped answering; run `hal logs {ns.job}` again"
            ) from err
        raise Unavailable(f"cannot reach the HAL server ({err.__class__.__name__})") from err
    return 0


def cmd_alerts(ns: argparse.Namespace) -> int:
    try:
        with _client() as http:
            r = http.get("/v1/alerts")
            _raise_for(r)
    except httpx.TransportError as err:
        raise Unavailable(f"cannot reach the HAL server ({err.__class__.__name__})") from err
    body = r.json()
    rows = list(body["alerts"]) + (list(body["resolved"]) if ns.all else [])
    if not rows:
        print("no alerts firing")
        return 0
    print(f"{'STATE':<9} {'ALERT':<24} {'SEVERITY':<9} SUMMARY")
    for a in rows:
        print(f"{a['state']:<9} {a['name']:<24} {a['severity']:<9} {a['summary']}")
    return 0
