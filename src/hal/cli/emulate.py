"""``hal emulate``: many emulated nodes in one process (``hal.agent.emulate``), to drive a
control plane at scale through the real agent protocol.

``add_commands(sub)`` registers the command on the ``hal`` parser (``cli/parser.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import Any

from hal.core.errors import InvalidRequest


def add_commands(sub: Any) -> None:
    from hal.cli import observe

    p = sub.add_parser(
        "emulate",
        help="present N emulated nodes to a control plane (jobs run as timed sleeps)",
        description="One process registers N nodes (PREFIX1..PREFIXN) with the control "
        "plane and speaks the agent protocol for each; a job runs as a timer "
        "(HAL_EMULATE_RUNTIME=SECS in its environment, a '#HAL_EMULATE runtime=SECS' line "
        "in its script, else --runtime). For scale tests: docs/admin/scale.md.",
    )
    p.add_argument(
        "--server",
        action="append",
        default=None,
        metavar="URL",
        help="control plane URL (default HAL_URL); repeat it (or give a comma list) for a "
        "leader and its standbys: the nodes follow the leader",
    )
    p.add_argument(
        "--token",
        default=None,
        help="an agent token that may serve these nodes (default HAL_TOKEN)",
    )
    p.add_argument("--nodes", type=int, required=True, help="how many nodes to present")
    p.add_argument("--prefix", default="emu", help="node names: PREFIX1, PREFIX2, ...")
    p.add_argument(
        "--first", type=int, default=1, help="the first node's number (several processes)"
    )
    p.add_argument("--cpus", type=int, default=16, help="CPUs each node offers")
    p.add_argument("--memory", default="64G", help="memory each node offers, e.g. 64G")
    p.add_argument("--feature", action="append", default=[], help="a node feature (repeatable)")
    p.add_argument(
        "--runtime",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a job's run time without a hint in its environment or script (default 60)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=256,
        help="registrations and report flushes in flight at once (default 256)",
    )
    p.set_defaults(func=cmd_emulate)
    observe.add_logging_options(p, console=True)


def cmd_emulate(ns: argparse.Namespace) -> int:
    from hal.agent.channel import CredentialRefused
    from hal.agent.emulate import EmulateConfig, Emulator, raise_open_files
    from hal.client.config import load_client_config
    from hal.slurm.syntax import parse_memory

    if ns.nodes < 1 or ns.first < 0 or ns.cpus < 1 or ns.concurrency < 1 or ns.runtime < 0:
        raise InvalidRequest(
            "--nodes, --cpus and --concurrency: at least 1; --first and --runtime: at least 0"
        )
    try:
        raise_open_files(ns.nodes)
    except ValueError as err:
        raise InvalidRequest(str(err), field="nodes") from None
    cfg = load_client_config(",".join(ns.server) if ns.server else None, ns.token)
    if not cfg.token:
        raise InvalidRequest(
            "the emulator needs an agent token: --token or HAL_TOKEN (`hal user add NAME "
            "--agent` makes one)",
            field="token",
        )
    config = EmulateConfig(
        server_url=cfg.url,
        token=cfg.token,
        nodes=ns.nodes,
        prefix=ns.prefix,
        first=ns.first,
        cpus=ns.cpus,
        memory_bytes=parse_memory(ns.memory),
        runtime_seconds=ns.runtime,
        features=tuple(ns.feature),
        concurrency=ns.concurrency,
    )
    emulator = Emulator(config)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await emulator.run(stop)

    started = time.monotonic()
    try:
        try:
            import uvloop

            uvloop.run(run())
        except ImportError:
            asyncio.run(run())
    except CredentialRefused:
        return 3
    print(
        f"hal emulate: {ns.nodes} node(s) stopped after {time.monotonic() - started:.0f} s; "
        f"{emulator.launched} job(s) launched, {emulator.finished} ended",
        file=sys.stderr,
    )
    return 0
