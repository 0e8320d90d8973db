"""``hal htc sessions`` and ``hal htc show SESSION``: high-throughput sessions."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def add_commands(sub: Any) -> None:
    htc = sub.add_parser("htc", help="high-throughput sessions (short tasks on warm workers)")
    hsub = htc.add_subparsers(metavar="COMMAND")

    p = hsub.add_parser("sessions", help="list sessions: state, rate, backlog, workers")
    p.add_argument("--all", action="store_true", help="include ended sessions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sessions)

    p = hsub.add_parser("show", help="one session in detail, with its workers")
    p.add_argument("session")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = hsub.add_parser("cancel", help="cancel a session (its queued tasks are dropped)")
    p.add_argument("session")
    p.set_defaults(func=cmd_cancel)


def cmd_sessions(ns: argparse.Namespace) -> int:
    from hal.htc import HtcClient

    with HtcClient() as hc:
        sessions = hc.sessions(include_ended=ns.all)
    if ns.json:
        print(json.dumps([s.model_dump() for s in sessions], indent=2))
        return 0
    header = f"{'SESSION':<14} {'USER':<10} {'STATE':<9} {'PRIO':>4} {'WORKERS':>8} "
    header += f"{'BACKLOG':>9} {'RUNNING':>8} {'DONE':>10} {'FAILED':>7} {'RATE/S':>9}  SERVICE"
    print(header)
    for s in sessions:
        workers = f"{sum(w.state == 'ready' for w in s.workers)}/{s.target_workers}"
        print(
            f"{s.id:<14} {s.user[:10]:<10} {s.state:<9} {s.priority:>4} {workers:>8} "
            f"{s.backlog:>9} {s.in_flight:>8} {s.completed:>10} {s.failed:>7} "
            f"{s.rate_per_second:>9.1f}  {s.service}"
        )
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    from hal.htc import HtcClient

    with HtcClient() as hc:
        info = hc.session(ns.session)
    if ns.json:
        print(info.model_dump_json(indent=2))
        return 0
    fields = info.model_dump(exclude={"workers"})
    for key in ("created", "ended"):
        if fields[key]:
            fields[key] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(fields[key]))
    for key, value in fields.items():
        print(f"{key:>16}: {value}")
    print(f"{'workers':>16}: {len(info.workers)}")
    for w in info.workers:
        where = f"on {w.host or '-'} pid {w.pid}"
        print(f"{'':>18}job {w.job_id} {w.state} {where} in flight {w.in_flight}")
    return 0


def cmd_cancel(ns: argparse.Namespace) -> int:
    from hal.htc import HtcClient

    with HtcClient() as hc:
        info = hc.cancel(ns.session)
    print(f"session {info.id} {info.state}")
    return 0
