"""Native commands: queue, show, cancel, nodes, partitions, acct, drain, resume, user,
login, events, submit, compat install-shims. Tables are plain; ``--json`` gives the REST
objects unchanged."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hal.client import HalClient
from hal.client.config import default_server_url, store_token
from hal.core.errors import InvalidRequest
from hal.wire.jobs import JobInfo

if TYPE_CHECKING:
    from hal.wire.nodes import UserCreated, UserInfo


def add_commands(sub: Any) -> None:
    def cmd(name: str, help_text: str, func: Any, aliases: Sequence[str] = ()) -> Any:
        p = sub.add_parser(name, help=help_text, aliases=list(aliases))
        p.set_defaults(func=func)
        return p

    # listed here; `hal submit ...` itself is `hal sbatch ...` (cli/main.py)
    sub.add_parser("submit", help="submit a batch script (sbatch options)")

    p = cmd("queue", "list pending and running jobs", cmd_queue)
    p.add_argument("--all", action="store_true", help="include recently finished jobs")
    p.add_argument("-u", "--user", default=None)
    p.add_argument("--json", action="store_true")

    p = cmd("show", "show one job", cmd_show)
    p.add_argument("kind", nargs="?", choices=["job"], help="optional: hal show job ID")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true", help="the REST object unchanged, every field")

    p = cmd("cancel", "cancel jobs", cmd_cancel)
    p.add_argument("job_ids", nargs="+")
    p.add_argument(
        "-s", "--signal", type=_signal, default=None, help="signal number or name (USR1, SIGTERM)"
    )

    p = cmd("nodes", "list nodes", cmd_nodes)
    p.add_argument("--json", action="store_true")

    p = cmd("partitions", "list partitions", cmd_partitions)
    p.add_argument("--json", action="store_true")

    p = cmd("acct", "accounting: every job ever run", cmd_acct)
    p.add_argument("-u", "--user", default=None)
    p.add_argument("-j", "--jobs", default=None)
    p.add_argument("--json", action="store_true")

    for name, state in (("drain", "DRAIN"), ("resume", "RESUME")):
        p = cmd(name, f"{name} a node", cmd_node_state)
        p.add_argument("node")
        p.add_argument("--reason", default="")
        p.set_defaults(state=state)

    user = sub.add_parser("user", help="manage users and tokens (admin)")
    usub = user.add_subparsers(metavar="ACTION")
    p = usub.add_parser("add", help="create a user and print its token")
    p.add_argument("name")
    p.add_argument("--admin", action="store_true")
    p.add_argument(
        "--agent",
        action="store_true",
        help="a token for node agents: accepted by the agent channel only (docs/admin/security.md)",
    )
    p.add_argument(
        "--nodes",
        default="",
        metavar="HOSTLIST",
        help="with --agent: the nodes the token may serve, e.g. node[1-4] (default: any)",
    )
    p.set_defaults(func=cmd_user_add)
    p = usub.add_parser("token", help="give a user a new token; the old one stops working")
    p.add_argument("name")
    p.set_defaults(func=cmd_user_token)
    p = usub.add_parser("delete", help="remove a user; their token stops working")
    p.add_argument("name")
    p.set_defaults(func=cmd_user_delete)
    p = usub.add_parser("list", help="list users")
    p.set_defaults(func=cmd_user_list)

    p = cmd("login", "store a token for a server URL", cmd_login)
    p.add_argument(
        "--server",
        action="append",
        default=None,
        metavar="URL",
        help="the server (default HAL_URL); repeat it (or give a comma list) for a leader "
        "and its standbys: the token is stored for each",
    )
    p.add_argument("--token", required=True)

    p = cmd("events", "follow the job/node event stream", cmd_events)
    p.add_argument("--after", type=int, default=0)
    p.add_argument("--no-follow", action="store_true")

    compat = sub.add_parser("compat", help="Slurm compatibility helpers")
    csub = compat.add_subparsers(metavar="ACTION")
    p = csub.add_parser("install-shims", help="install sbatch/squeue/... wrappers into DIR")
    p.add_argument("dir")
    p.add_argument(
        "--force", action="store_true", help="overwrite even where a real Slurm command is found"
    )
    p.set_defaults(func=cmd_install_shims)


def _signal(text: str) -> int:
    """``hal cancel -s``: a number (10) or a name (USR1, SIGUSR1, usr1)."""
    if text.isdigit():
        return int(text)
    name = text.upper() if text.upper().startswith("SIG") else "SIG" + text.upper()
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"unknown signal {text!r}; write a number (10) or a name (USR1, SIGTERM)"
        ) from None


def _print_jobs(jobs: list[JobInfo], as_json: bool) -> None:
    if as_json:
        print(json.dumps([j.model_dump() for j in jobs], indent=2))
        return
    print(
        f"{'JOB':>12} {'USER':<10} {'NAME':<16} {'PARTITION':<10} {'STATE':<13} "
        f"{'REASON/NODES':<24}"
    )
    for j in jobs:
        where = ",".join(j.nodes) if j.nodes else j.reason
        print(
            f"{j.display_id:>12} {j.user[:10]:<10} {j.name[:16]:<16} {j.partition[:10]:<10} "
            f"{j.state:<13} {where[:40]:<24}"
        )


def cmd_queue(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        jobs = hal.jobs(include_finished=ns.all, users=[ns.user] if ns.user else None)
    _print_jobs(jobs, ns.json)
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        job = hal.job(ns.job_id)
        if ns.json:
            print(job.model_dump_json(indent=2))
            return 0
        from hal.cli.show import feedback_line, job_lines

        feedback = hal.job_feedback(job.id, points=False)
    print("\n".join([*job_lines(job, time.time()), *feedback_line(feedback)]))
    return 0


def cmd_cancel(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        for ident in ns.job_ids:
            ids = hal.cancel(ident, signal=ns.signal)
            print(
                f"cancelled {ident}: {len(ids)} job(s)"
                if ns.signal is None
                else f"signalled {ident}: {len(ids)} job(s)"
            )
    return 0


def cmd_nodes(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        nodes = hal.nodes()
    if ns.json:
        print(json.dumps([n.model_dump() for n in nodes], indent=2))
        return 0
    print(
        f"{'NODE':<16} {'STATE':<8} {'CPUS(A/T)':>10} {'MEM GiB(A/T)':>14} {'GPUS(A/T)':>10}"
        f"  REASON"
    )
    from hal.compat.node_states import state_compact

    for n in nodes:
        gib = 1024**3
        # sinfo's state, with its suffixes: idle~ for a [cloud] node not made yet ...
        print(
            f"{n.name:<16} {state_compact(n):<8} {f'{n.cpus_alloc}/{n.cpus}':>10} "
            f"{f'{n.memory_alloc_bytes / gib:.1f}/{n.memory_bytes / gib:.1f}':>14} "
            f"{f'{n.gpus_alloc}/{n.gpus}':>10}  {n.reason}"
        )
    return 0


def cmd_partitions(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        parts = hal.partitions()
    if ns.json:
        print(json.dumps([p.model_dump() for p in parts], indent=2))
        return 0
    for p in parts:
        star = "*" if p.default else ""
        limit = p.max_time_seconds or "unlimited"
        print(f"{p.name}{star:<2} state={p.state} max_time={limit} nodes={','.join(p.nodes)}")
    return 0


def cmd_acct(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        jobs = hal.jobs(
            history=True,
            users=[ns.user] if ns.user else None,
            ids=ns.jobs.split(",") if ns.jobs else None,
        )
    _print_jobs(jobs, ns.json)
    return 0


def cmd_node_state(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        node = hal.update_node(ns.node, ns.state, ns.reason)
    print(f"{node.name}: {node.display_state} {node.reason}".rstrip())
    return 0


def cmd_user_add(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        created = hal.add_user(ns.name, admin=ns.admin, agent=ns.agent, nodes=ns.nodes)
    print(f"created user {created.name}{_role(created)}")
    _print_token(created)
    return 0


def cmd_user_token(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        issued = hal.new_token(ns.name)
    print(f"new token for user {issued.name}{_role(issued)}; the old one no longer works")
    _print_token(issued)
    return 0


def _role(user: UserInfo | UserCreated) -> str:
    if user.agent:
        return f" (agent: {user.nodes or 'any node'})"
    return " (admin)" if user.admin else ""


def _print_token(user: UserCreated) -> None:
    if user.agent:
        print(
            "token (shown once; put it in a file only root reads, e.g. /etc/hal/agent.token, "
            f"for `hal agent --token-file`): {user.token}"
        )
    else:
        print(f"token (shown once; give it to the user for `hal login`): {user.token}")


def cmd_user_delete(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        gone = hal.delete_user(ns.name)
    print(f"deleted user {gone.name}; their token no longer works (their jobs are kept)")
    return 0


def cmd_user_list(_ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        for user in hal.users():
            print(f"{user.name}{_role(user)}")
    return 0


def cmd_login(ns: argparse.Namespace) -> int:
    token = ns.token.strip()
    if not token:
        # an empty token would check the stored one instead, then overwrite it with ""
        raise InvalidRequest("--token is empty; give the token `hal user add` printed")
    from hal.client.servers import server_urls

    url = ",".join(server_urls(ns.server)) if ns.server else default_server_url()
    with HalClient(url, token) as hal:
        me = hal.whoami()
    path = store_token(url, me.name, token)
    print(f"logged in to {url} as {me.name}; token stored in {path}")
    return 0


def cmd_events(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        for event in hal.events(ns.after, follow=not ns.no_follow):
            print(event.model_dump_json(), flush=True)
    return 0


def cmd_install_shims(ns: argparse.Namespace) -> int:
    from hal.compat.shims import install_shims

    written = install_shims(Path(ns.dir), force=ns.force)
    for path in written:
        print(f"installed {path}")
    if not written:
        print("nothing installed", file=sys.stderr)
        return 1
    return 0
