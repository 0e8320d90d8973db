"""``hal cache control-plane`` and ``hal cache node``: run the data plane's processes.

Wired into ``hal.cli.parser`` with ``cache.add_commands(sub)``; ``hal bench cache`` is added to
the bench group with ``cache.add_bench_command(bench_sub)``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any


def add_commands(sub: Any) -> None:
    cache = sub.add_parser("cache", help="the data plane: cache control plane and cache nodes")
    csub = cache.add_subparsers(metavar="COMMAND")

    cp = csub.add_parser("control-plane", help="run the cache control plane (HTTP, /v1)")
    cp.add_argument("--listen", default="127.0.0.1:8480", help="HOST:PORT (default %(default)s)")
    cp.add_argument(
        "--db",
        default=None,
        help="database URL: sqlite:///path or postgresql://user@host/db "
        "(default: SQLite under ~/.local/share/hal)",
    )
    cp.add_argument(
        "--heartbeat-interval-ms",
        type=int,
        default=2000,
        help="interval the control plane asks nodes to heartbeat at",
    )
    cp.add_argument(
        "--inactive-after",
        type=float,
        default=15.0,
        help="seconds without a heartbeat before an instance is inactive",
    )
    cp.add_argument(
        "--peer-sourcing",
        action="store_true",
        help="nearest may pick any holder in the same tree, not only ancestors",
    )
    cp.add_argument(
        "--edge-latency-ms", type=float, default=1.0, help="default latency of a parent-child link"
    )
    cp.add_argument("--edge-bandwidth-mbps", type=float, default=10_000.0)
    cp.add_argument("--edge-cost", type=float, default=1.0)
    cp.add_argument("--log-level", default="WARNING")
    cp.add_argument("--token-file", default=None, help=TOKEN_HELP)
    cp.add_argument("--tls-cert", default=None, metavar="FILE", help="serve HTTPS with it")
    cp.add_argument("--tls-key", default=None, metavar="FILE", help="the certificate's key")
    cp.set_defaults(func=cmd_control_plane)

    nd = csub.add_parser("node", help="run a Redis-protocol cache node")
    nd.add_argument("--instance-id", required=True)
    nd.add_argument("--listen-host", default="127.0.0.1")
    nd.add_argument("--listen-port", type=int, required=True)
    nd.add_argument(
        "--control-plane-events-url",
        required=True,
        action="append",
        help="e.g. http://127.0.0.1:8480/v1/events (the base is this URL without /events); "
        "repeat it (or give a comma list) for several control planes on one database",
    )
    nd.add_argument("--max-bytes", type=int, default=0, help="maxmemory in bytes (0: unlimited)")
    nd.add_argument("--maxmemory-policy", default="noeviction")
    nd.add_argument("--parent-id", default=None, help="used when registering this node")
    nd.add_argument("--tier", choices=["root", "branch", "leaf"], default=None)
    nd.add_argument("--region", default=None)
    nd.add_argument(
        "--advertise-address",
        default=None,
        help="HOST:PORT other nodes use to reach this one (default: listen address)",
    )
    nd.add_argument(
        "--state-dir",
        default=None,
        help="where the registration and parent chain are cached "
        "(default ~/.local/share/hal/cache-nodes)",
    )
    nd.add_argument(
        "--peer-sourcing",
        action="store_true",
        help="also pull misses from non-ancestor holders in the same tree",
    )
    nd.add_argument(
        "--pull-timeout",
        type=float,
        default=3.0,
        help="seconds a miss may spend pulling through the tree",
    )
    nd.add_argument(
        "--ack-wait",
        type=float,
        default=1.0,
        help="seconds a write waits for the control plane before acknowledging",
    )
    nd.add_argument(
        "--reconcile-interval", type=float, default=30.0, help="seconds between full inventories"
    )
    nd.add_argument(
        "--inventory-part-keys",
        type=int,
        default=50_000,
        help="keys per request of a full inventory; a bigger one goes in several parts",
    )
    nd.add_argument(
        "--link-latency-ms",
        type=float,
        default=None,
        help="latency of the link to the parent (reported as proximity)",
    )
    nd.add_argument(
        "--metrics-listen",
        default="",
        metavar="HOST:PORT",
        help="serve the node's own Prometheus /metrics there (default: none)",
    )
    nd.add_argument("--link-bandwidth-mbps", type=float, default=None)
    nd.add_argument("--link-cost", type=float, default=None)
    nd.add_argument("--log-level", default="WARNING")
    nd.add_argument("--token-file", default=None, help=TOKEN_HELP)
    nd.add_argument(
        "--ca-file",
        default=None,
        metavar="FILE",
        help="trust this CA for an https control plane (default HAL_CA_FILE)",
    )
    add_metrics_security(nd)
    nd.set_defaults(func=cmd_node)


TOKEN_HELP = (
    "a file holding the data plane's token, the same on the control plane, its nodes and "
    "the HAL server (default HAL_CACHE_TOKEN; none: no token asked)"
)


def add_metrics_security(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-tls-cert",
        default=None,
        metavar="FILE",
        help="serve /metrics over HTTPS with this certificate (default HAL_METRICS_TLS_CERT)",
    )
    p.add_argument(
        "--metrics-tls-key",
        default=None,
        metavar="FILE",
        help="its key (default HAL_METRICS_TLS_KEY)",
    )
    p.add_argument(
        "--metrics-token-file",
        default=None,
        metavar="FILE",
        help="/metrics asks for the bearer token in this file (default HAL_METRICS_TOKEN; "
        "none: open)",
    )


def add_bench_command(bsub: Any) -> None:
    p = bsub.add_parser("cache", help="cache control plane and cache node throughput")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="smaller sizes (for smoke tests)")
    p.set_defaults(func=cmd_bench_cache)


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def cmd_control_plane(ns: argparse.Namespace) -> int:
    from hal.cache.directory import DirectorySettings
    from hal.cache.registry import LinkMetrics
    from hal.cache.server import run

    _logging(ns.log_level)
    settings = DirectorySettings(
        heartbeat_interval_ms=ns.heartbeat_interval_ms,
        inactive_after_s=ns.inactive_after,
        peer_sourcing=ns.peer_sourcing,
        default_link=LinkMetrics(ns.edge_latency_ms, ns.edge_bandwidth_mbps, ns.edge_cost),
    )
    from hal.cache.auth import cache_token
    from hal.cli.local import server_tls

    return run(ns.listen, ns.db, settings, token=cache_token(ns.token_file), tls=server_tls(ns))


def _node_security(ns: argparse.Namespace) -> None:
    """The node's token, CA and metrics TLS, as the environment its clients and its
    metrics listener read (``hal.cache.auth``, ``hal.host.tls``, ``hal.observe.listener``)."""
    import os

    from hal.cache.auth import TOKEN_ENV, cache_token
    from hal.host.tls import CA_ENV
    from hal.observe.listener import metrics_security

    token = cache_token(ns.token_file)
    if token:
        os.environ[TOKEN_ENV] = token
    if ns.ca_file:
        os.environ[CA_ENV] = ns.ca_file
    metrics_security(ns.metrics_tls_cert, ns.metrics_tls_key, ns.metrics_token_file)


def cmd_node(ns: argparse.Namespace) -> int:
    from hal.cache.commands import parse_memory
    from hal.cache.controlclient import base_url_from_events_url
    from hal.cache.node import NodeSettings, run_node
    from hal.cache.values import POLICIES

    _logging(ns.log_level)
    _node_security(ns)
    policy = ns.maxmemory_policy.lower()
    if policy not in POLICIES:
        print(
            f"hal: error: --maxmemory-policy must be one of {', '.join(POLICIES)}", file=sys.stderr
        )
        return 2
    if ns.inventory_part_keys < 1:
        print("hal: error: --inventory-part-keys must be at least 1", file=sys.stderr)
        return 2
    if ns.metrics_listen:
        from hal.observe.listener import parse_listen

        try:
            parse_listen(ns.metrics_listen)
        except ValueError as err:
            print(f"hal: error: --metrics-listen: {err}, e.g. 127.0.0.1:9480", file=sys.stderr)
            return 2
    state_dir = (
        Path(ns.state_dir).expanduser()
        if ns.state_dir
        else Path("~/.local/share/hal/cache-nodes").expanduser()
    )
    settings = NodeSettings(
        instance_id=ns.instance_id,
        listen_host=ns.listen_host,
        listen_port=ns.listen_port,
        control_plane_url=base_url_from_events_url(",".join(ns.control_plane_events_url)),
        advertise_address=ns.advertise_address,
        max_bytes=parse_memory(str(ns.max_bytes)) or 0,
        policy=policy,
        tier=ns.tier,
        parent_id=ns.parent_id,
        region=ns.region,
        state_dir=state_dir,
        peer_sourcing=ns.peer_sourcing,
        pull_timeout_s=ns.pull_timeout,
        ack_wait_s=ns.ack_wait,
        reconcile_every_s=ns.reconcile_interval,
        inventory_part_keys=ns.inventory_part_keys,
        metrics_listen=ns.metrics_listen,
        metadata={
            "linkLatencyMs": ns.link_latency_ms,
            "linkBandwidthMbps": ns.link_bandwidth_mbps,
            "linkCost": ns.link_cost,
        },
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_node(settings, stop)

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        pass
    asyncio.run(main())
    return 0


def cmd_bench_cache(ns: argparse.Namespace) -> int:
    from hal.bench import emit
    from hal.bench.cache import run_cache_bench

    return emit(run_cache_bench(quick=ns.quick), ns.json)


def main(argv: list[str] | None = None) -> int:
    """``python -m hal.cli.cache ...``: the same commands without the rest of ``hal``."""
    parser = argparse.ArgumentParser(prog="hal")
    sub = parser.add_subparsers(metavar="COMMAND")
    add_commands(sub)
    bench = sub.add_parser("bench").add_subparsers(metavar="BENCHMARK")
    add_bench_command(bench)
    ns = parser.parse_args(argv)
    if not hasattr(ns, "func"):
        parser.print_help()
        return 2
    result: int = ns.func(ns)
    return result


if __name__ == "__main__":
    sys.exit(main())
