"""argparse wiring for the native ``hal`` commands."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from types import ModuleType

from hal import __version__
from hal.compat.names import SLURM_COMMANDS

CACHE_PLANE_HELP = (
    "also serve the cache control plane (docs/admin/cache.md) under /cache: cache nodes use "
    "--control-plane-events-url http://HOST:PORT/cache/v1/events"
)


# Which of hal.cli's modules registers each native command (``add_commands``), in the
# order ``hal --help`` lists them; tests/unit/cli/test_parser.py checks it against what the
# modules register. `hal NAME` imports NAME's module only: importing all of them took
# half a second of CPU, paid by every `hal agent` and every native command.
COMMAND_MODULES: dict[str, str] = {
    "emulate": "emulate",
    **dict.fromkeys(
        ("submit", "queue", "show", "cancel", "nodes", "partitions", "acct", "drain"), "native"
    ),
    **dict.fromkeys(("resume", "user", "login", "events", "compat"), "native"),
    "explain": "explain",
    "bench": "bench",
    "cache": "cache",
    "sim": "sim",
    "predict": "predict",
    "cloud": "cloud",
    "artifact": "artifacts",
    "logs": "observe",
    "alerts": "observe",
    "htc": "htc",
    "topology": "topology",
    "data": "data",
    "harmonic": "harmonic",
    "feedback": "feedback",
    "certs": "certs",
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"hal.cli.{name}")


CONFIG_HELP = "the cluster's configuration file (default: hal.toml in --data-dir, if any)"


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The ``hal`` parser. With ``argv``, the benchmarks' own subcommands (whose modules
    import the simulator, the test kit and numpy: a quarter of a second) are only
    registered when ``argv`` asks for ``hal bench``."""
    p = argparse.ArgumentParser(
        prog="hal",
        description=f"HAL workload scheduler. Slurm commands: hal {'|'.join(SLURM_COMMANDS)} "
        "(same flags and output as Slurm; hal prio: sprio).",
    )
    p.add_argument("--version", action="version", version=f"hal {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")

    own = {"up": _add_up, "server": _add_server, "agent": _add_agent}
    named = argv[0] if argv else ""
    if named in own or named in COMMAND_MODULES:  # `hal NAME`: NAME's module alone
        groups = [named if named in own else COMMAND_MODULES[named]]
    else:  # `hal`, `hal --help`, a misspelt command: all of them, listed in this order
        groups = [*own, *dict.fromkeys(COMMAND_MODULES.values())]
    for group in groups:
        if group in own:
            own[group](sub)
        elif group == "bench":
            _module("bench").add_commands(sub, with_modules=not argv or argv[0] == "bench")
        else:
            _module(group).add_commands(sub)
    return p


def _add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser("up", help="start a local cluster: control plane + agents (SQLite)")
    up.add_argument("--port", type=_port, default=None, help="HTTP port (default 8470)")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--data-dir", default=None, help="state directory (default ~/.local/share/hal)")
    up.add_argument(
        "--agents",
        type=_at_least(0),
        default=None,
        help="number of local agents (default 2; 1 on a host with one CPU)",
    )
    up.add_argument(
        "--cpus-per-agent",
        type=_at_least(1),
        default=None,
        help="CPUs each agent offers, all sharing this machine's CPUs (default: the "
        "machine's CPUs split between the agents, each bound to its own)",
    )
    up.add_argument(
        "--keep-jobs",
        action="store_true",
        help="at Ctrl-C, leave running jobs running; the next `hal up` on the same state "
        "adopts them (default: they are cancelled with the cluster)",
    )
    up.add_argument("--config", default=None, help=CONFIG_HELP)
    up.add_argument("--cache-control-plane", action="store_true", help=CACHE_PLANE_HELP)
    from hal.cli import local, observe

    up.set_defaults(func=local.cmd_up)
    observe.add_logging_options(up, console=True)


def _add_server(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    srv = sub.add_parser("server", help="run the control plane alone")
    srv.add_argument(
        "--db",
        type=_database_url,
        default=None,
        help="database URL, e.g. postgresql://user@host/hal (default: SQLite in --data-dir)",
    )
    srv.add_argument("--data-dir", default=None)
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=_port, default=None)
    srv.add_argument("--config", default=None, help=CONFIG_HELP)
    srv.add_argument("--cache-control-plane", action="store_true", help=CACHE_PLANE_HELP)
    srv.add_argument(
        "--init-admin",
        default=None,
        metavar="USER",
        help="create USER as administrator if absent and print its token",
    )
    add_tls_options(srv)
    srv.add_argument(
        "--client-ca",
        default=None,
        metavar="FILE",
        help="mutual TLS for agents: each must present a certificate signed by this CA "
        "for its node's name (`hal certs issue NODE --client`), as well as its token",
    )
    srv.add_argument(
        "--insecure-http",
        action="store_true",
        help="serve plain HTTP on an address other than loopback without a warning "
        "(tokens then cross the network in the clear)",
    )
    srv.add_argument(
        "--metrics-token-file",
        default=None,
        metavar="FILE",
        help="/metrics asks for the bearer token in this file (default HAL_METRICS_TOKEN; "
        "none: open)",
    )
    srv.add_argument(
        "--no-standby",
        action="store_true",
        help="PostgreSQL: exit (status 5) when another server leads the database, instead "
        "of standing by to take over (docs/admin/failover.md)",
    )
    srv.add_argument(
        "--advertise-url",
        default=None,
        metavar="URL",
        help="where clients and agents reach this server once it leads, as standbys send "
        "them (default: the URL it listens on, by this host's name)",
    )
    from hal.cli import local, observe

    srv.set_defaults(func=local.cmd_server)
    observe.add_logging_options(srv)


def add_tls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tls-cert",
        default=None,
        metavar="FILE",
        help="serve HTTPS with this PEM certificate (`hal certs issue HOST --dns HOST`)",
    )
    p.add_argument("--tls-key", default=None, metavar="FILE", help="the certificate's key")


def _add_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ag = sub.add_parser("agent", help="run a node agent that joins a control plane")
    ag.add_argument(
        "--server",
        action="append",
        default=None,
        metavar="URL",
        help="control plane URL (default HAL_URL); repeat it (or give a comma list) for a "
        "leader and its standbys: the agent follows the leader",
    )
    ag.add_argument(
        "--token",
        default=None,
        help="agent token (default HAL_TOKEN); `ps` shows it to every user: prefer "
        "--token-file or HAL_TOKEN",
    )
    ag.add_argument(
        "--token-file",
        default=None,
        help="a file holding the agent token (`hal user add NAME --agent`)",
    )
    ag.add_argument(
        "--ca-file",
        default=None,
        metavar="FILE",
        help="trust this CA's certificates for an https server (default HAL_CA_FILE; the "
        "system's CAs are trusted too)",
    )
    ag.add_argument(
        "--tls-cert",
        default=None,
        metavar="FILE",
        help="the node's client certificate, for a server that asks agents for one (mutual "
        "TLS: `hal certs issue NODE --client`; default HAL_TLS_CERT)",
    )
    ag.add_argument("--tls-key", default=None, metavar="FILE", help="its key (default HAL_TLS_KEY)")
    from hal.cli import cache

    cache.add_metrics_security(ag)
    ag.add_argument("--name", default=None, help="node name (default: short hostname)")
    ag.add_argument("--cpus", type=_at_least(1), default=None)
    ag.add_argument(
        "--cpu-list",
        default=None,
        metavar="LIST",
        help="run the agent and its jobs on these CPUs of the host only, e.g. 0-3,8; the "
        "node offers as many CPUs (how `hal up` gives each local agent its own)",
    )
    ag.add_argument("--memory", default=None, help="memory to offer, e.g. 16G")
    ag.add_argument("--gpus", type=_at_least(0), default=None)
    ag.add_argument(
        "--artifact-cache",
        default=None,
        metavar="SIZE",
        help="keep this node's copies of artifacts and its Python environments within "
        "SIZE, e.g. 20G (default 10G; the server's [artifacts] node_cache wins where set); "
        "those a running job holds are never removed",
    )
    ag.add_argument(
        "--gpu-type",
        default=None,
        metavar="TYPE",
        help="the GPUs' type as jobs name it (--gres=gpu:TYPE:N), e.g. nvidia_a100 "
        "(default: the model NVML reports)",
    )
    ag.add_argument(
        "--gpu-islands",
        default=None,
        metavar="ISLANDS",
        help="NVLink islands of the GPUs, e.g. 0-3,4-7 (default: what NVML finds)",
    )
    ag.add_argument(
        "--topology-label",
        action="append",
        default=[],
        metavar="LEVEL=NAME",
        help="where the node stands: rack=r1, zone=z1, region=eu, site=s1 (repeatable)",
    )
    ag.add_argument(
        "--nvlink-domain",
        default="",
        metavar="NAME",
        help="the multi-node NVLink domain (e.g. NVL72 rack) this node belongs to "
        "(default: from NVML's GPU fabric info, none without)",
    )
    ag.add_argument(
        "--gpu-health-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="read the GPUs' health through NVML this often (lost GPUs, uncorrectable ECC "
        "errors, pending row remaps drain the node; default 60, 0 = never)",
    )
    ag.add_argument(
        "--traffic-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="read the running jobs' TCP traffic this often for the control plane's graph "
        "of who talks to whom (default 10, 0 = never)",
    )
    ag.add_argument(
        "--interruption-notice",
        default="",
        metavar="URL",
        help="read the provider's notices that this machine is being taken back from the "
        "instance metadata service at URL (EC2: http://169.254.169.254; IMDSv2) and tell "
        "the control plane, which moves the jobs away (default: off)",
    )
    ag.add_argument(
        "--interruption-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="read the interruption notices this often (default 5)",
    )
    ag.add_argument(
        "--features",
        default="",
        help="comma-separated node features a job's --constraint names (letters, digits, _.:+=/-)",
    )
    ag.add_argument("--state-dir", default=None)
    ag.add_argument(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve the agent's Prometheus /metrics here (PORT, :PORT or HOST:PORT; "
        'default HAL_AGENT_METRICS_LISTEN; "" or neither set = off)',
    )
    ag.add_argument(
        "--isolation", default="auto", choices=["auto", "cgroup2", "cgroup1", "rlimit", "none"]
    )
    ag.add_argument(
        "--constrain-devices",
        default="auto",
        choices=["auto", "yes", "no"],
        help="let a job open only its own GPUs' device files, as Slurm's ConstrainDevices "
        "(auto: where the cgroup backend can and NVML names the devices; yes: or refuse "
        "to start)",
    )
    ag.add_argument(
        "--bind-cpus",
        default="auto",
        choices=["auto", "yes", "no"],
        help="start each job bound to its own CPUs of this host, as Slurm's task/affinity "
        "(auto: where the agent serves the host's own CPUs, i.e. without --cpus)",
    )
    ag.add_argument(
        "--constrain-cores",
        default="auto",
        choices=["auto", "yes", "no"],
        help="fence each bound job to its CPUs with the cpuset cgroup controller, so it "
        "cannot widen its affinity, as Slurm's ConstrainCores (auto: where the cgroup "
        "backend has cpuset and jobs are bound; yes: or refuse to start)",
    )
    ag.add_argument(
        "--unknown-users-as-agent",
        action="store_true",
        help="run the jobs of users without a Unix account on the control plane's host as "
        "this agent's user (a root agent refuses them otherwise: they would run as root)",
    )
    from hal.cli import local

    ag.set_defaults(func=local.cmd_agent)


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``low`` (0 for --cpus was taken as
    "not given" and the host's count used instead; a negative one failed later)."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {low}")
        return value

    return check


def _database_url(text: str) -> str:
    """A PostgreSQL or SQLite URL (a typo ended in SQLAlchemy's traceback)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from hal.db import normalise_url

    try:
        backend = make_url(normalise_url(text)).get_backend_name()
    except (ArgumentError, ValueError):  # not a URL; a port that is not a number
        backend = ""
    if backend not in ("postgresql", "sqlite"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a database URL HAL can use: write postgresql://USER@HOST/DB "
            "or sqlite:////PATH/hal.db"
        )
    return text


def _port(text: str) -> int:
    """A TCP port, 1 to 65535 (0 was taken as "not given" and 8470 bound instead)."""
    value = _at_least(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return value
