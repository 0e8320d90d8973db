"""``hal up``, ``hal server`` and ``hal agent``: the processes that make a cluster."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from hal.cli.host_share import (
    AgentShare,
    bind_to,
    host_cpu_ids,
    host_memory_bytes,
    parse_cpu_list,
    split_host,
)
from hal.client.config import DEFAULT_PORT, load_client_config, store_token
from hal.core.errors import InvalidRequest
from hal.host.tls import verify_for

if TYPE_CHECKING:
    from hal.api.server import HalServer
    from hal.config.model import HalConfig
    from hal.host.tls import ServerTls
    from hal.state.store import SqlStateStore


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop when it is installed (it comes with uvicorn[standard]); its
    faster event loop and HTTP parser cut per-request latency on the control plane."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def default_data_dir() -> Path:
    env = os.environ.get("HAL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hal"


def _url(host: str, port: int) -> str:
    """The control plane's URL for ``--host``: an IPv6 address in brackets (``--host ::1``
    made ``http://::1:8470``, which no client can parse)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _state_dir(path: Path) -> Path:
    """``path`` created if absent: one that cannot be (a file, a read-only place) is one
    line naming it, not the traceback of a ``mkdir``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidRequest(
            f"cannot use {path} as HAL's state directory: {err.strerror}; give --data-dir "
            "(or HAL_DATA_DIR) a directory this user may write",
            field="data_dir",
        ) from None
    return path


def _config(path: str | None, data_dir: Path) -> tuple[HalConfig, str]:
    """The cluster's configuration: ``--config``, else ``hal.toml`` in the state
    directory, else the defaults; and where it came from, for errors found later."""
    from hal.config.model import load_config

    if path is None and (data_dir / "hal.toml").exists():
        path = str(data_dir / "hal.toml")
    return load_config(path), path or "the default configuration"


def _server(
    config: HalConfig, source: str, db_url: str, data_dir: Path, ns: argparse.Namespace
) -> HalServer:
    """The control plane; a scheduler profile it cannot build is named as a mistake in
    the configuration file (exit 2, ``FILE: scheduler.FIELD: ...``) like any other."""
    from hal.api.server import HalServer
    from hal.scheduler.framework import ProfileError
    from hal.server.profile import config_error

    # what `scontrol reconfigure` and SIGHUP re-read: --config, else DATA_DIR/hal.toml
    path = Path(ns.config) if ns.config else data_dir / "hal.toml"
    try:
        return HalServer(
            config,
            db_url,
            data_dir=data_dir,
            cache_plane=ns.cache_control_plane,
            config_path=path,
        )
    except ProfileError as err:
        raise config_error(err, source) from None


LOCAL_AGENTS = "local-agents"  # the user whose agent token `hal up`'s agents hold
DEFAULT_AGENTS = 2


def _local_tokens(db_url: str, url: str) -> tuple[str, str]:
    """Store the local user's administrator token (the stored one if still valid, else a
    new one); return it, for the dashboard's link, and a new agent token for this run's
    agents: whatever reads an agent's environment (a job of the same Unix user) gets the
    agent channel, not the administrator's rights."""
    from hal.server.auth import token_hash
    from hal.server.users import agent_token, ensure_user, reset_token
    from hal.state.store import SqlStateStore

    user = getpass.getuser()
    store = SqlStateStore(db_url)
    try:
        _check_database(store, db_url)
        token = ensure_user(store, user, admin=True, now=time.time())
        if token is None:
            stored = load_client_config(url).token
            if stored and store.user_by_token_hash(token_hash(stored)) is not None:
                token = stored
            else:
                token = reset_token(store, user, admin=True)
        agents = agent_token(store, LOCAL_AGENTS, now=time.time())
    finally:
        store.close()
    store_token(url, user, token)
    return token, agents


def cmd_up(ns: argparse.Namespace) -> int:
    from hal.api.server import listen_socket
    from hal.cli.local_stop import end_jobs, running_jobs
    from hal.cli.up_banner import Banner
    from hal.server.control_plane import sqlite_url

    data_dir = Path(ns.data_dir).expanduser() if ns.data_dir else default_data_dir()
    port = ns.port or DEFAULT_PORT
    url = _url(ns.host, port)
    # refused before anything starts: more agents than this host has CPUs (the default
    # of two is one where the host has one)
    cpus = host_cpu_ids()
    agents = ns.agents if ns.agents is not None else min(DEFAULT_AGENTS, len(cpus))
    shares = split_host(agents, cpus, host_memory_bytes(), ns.cpus_per_agent)
    config, source = _config(ns.config, data_dir)
    db_url = sqlite_url(_state_dir(data_dir))

    async def run(server: HalServer, sock: socket.socket, tokens: tuple[str, str]) -> None:
        admin_token, agent_token = tokens
        # stop: the user asked (Ctrl-C); halt: the control plane stops, once the jobs
        # and agents have; hurry: a second Ctrl-C while the jobs end
        stop, halt, hurry = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        serving = asyncio.create_task(server.serve(ns.host, port, halt, sock=sock))
        agents: list[subprocess.Popen[bytes]] = []
        try:
            if not await _wait_healthy(url, serving, stop):
                print(file=sys.stderr)  # off the ^C line
                return  # Ctrl-C during start-up: no agents, no banner; stop the server
            adopted = running_jobs(server)  # from a stop with --keep-jobs (or a crash)

            def spawn(i: int) -> subprocess.Popen[bytes]:
                share = shares[i]
                return _spawn_agent(url, agent_token, share, data_dir / "agents" / share.name)

            agents.extend(spawn(i) for i in range(len(shares)))
            up = Banner(url, admin_token, data_dir, shares, ns.keep_jobs, tuple(adopted))
            print("\n".join(up.lines()), flush=True)
            keeper = asyncio.create_task(_keep_agents(agents, spawn, stop))
            await stop.wait()
            keeper.cancel()
            print(file=sys.stderr)  # off the ^C line
            for sig in STOP_SIGNALS:  # a second Ctrl-C: stop waiting for the jobs
                loop.add_signal_handler(sig, hurry.set)
            await end_jobs(server, ns.keep_jobs, data_dir, hurry)
        finally:
            print("hal: stopping agents and the control plane ...", file=sys.stderr)
            for proc in agents:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            for proc in agents:
                try:
                    await asyncio.to_thread(proc.wait, 15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            if server.cloud is not None:  # the [cloud] nodes it made here end with it
                await asyncio.to_thread(server.cloud.stop_local_nodes)
            halt.set()
            with contextlib.suppress(asyncio.CancelledError):
                await serving

    server = _server(config, source, db_url, data_dir, ns)
    with (
        _claimed(server, db_url),  # another control plane on this state: refused first
        listen_socket(ns.host, port) as sock,  # before a token is stored for this URL
    ):
        run_loop(run(server, sock, _local_tokens(db_url, url)))
    return 0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # HUP: its terminal closed
AGENT_RESTART_MAX_S = 60.0  # the longest wait before starting again an agent that keeps dying
AGENT_SETTLED_S = 60.0  # an agent that ran this long before it died is started again at once


async def _keep_agents(
    agents: list[subprocess.Popen[bytes]],
    spawn: Callable[[int], subprocess.Popen[bytes]],
    stop: asyncio.Event,
) -> None:
    """Start again each local agent that exits while `hal up` runs, saying so on stderr,
    as a service manager restarts a node's slurmd (its successor adopts the node's
    running jobs). One that dies within ``AGENT_SETTLED_S`` of its start waits 1 s, then
    twice as long each time, at most ``AGENT_RESTART_MAX_S``."""
    started = [time.monotonic()] * len(agents)
    wait = [0.0] * len(agents)
    due: dict[int, float] = {}  # agent → when it is started again
    while not stop.is_set():
        now = time.monotonic()
        for i, proc in enumerate(agents):
            code = proc.poll()
            if code is None or i in due:
                continue
            ran = now - started[i]
            wait[i] = (
                0.0 if ran >= AGENT_SETTLED_S else min(max(1.0, 2 * wait[i]), AGENT_RESTART_MAX_S)
            )
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
            print(
                f"hal: local agent node{i + 1} (pid {proc.pid}) exited with {how} after "
                f"{ran:.0f} s; starting it again" + (f" in {wait[i]:.0f} s" if wait[i] else ""),
                file=sys.stderr,
            )
            due[i] = now + wait[i]
        for i, when in list(due.items()):
            if now >= when:
                del due[i]
                agents[i] = spawn(i)
                started[i] = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def _wait_healthy(url: str, serving: asyncio.Task[None], stop: asyncio.Event) -> bool:
    """True once the control plane answers; False when Ctrl-C (``stop``) came first."""
    async with httpx.AsyncClient(timeout=2, verify=verify_for(url)) as http:
        for _ in range(300):
            if stop.is_set():
                return False
            if serving.done():
                serving.result()  # re-raise why the server could not start
                raise RuntimeError("the control plane stopped during start-up")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url + "/healthz")).status_code == 200:
                    return True
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the control plane did not answer on {url} within 15 s")


def _spawn_agent(
    url: str, token: str, share: AgentShare, state_dir: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HAL_TOKEN": token, "HAL_URL": url, UP_PID: str(os.getpid())}
    cmd = [sys.executable, "-m", "hal.cli.main", "agent", "--server", url, "--name", share.name]
    cmd += [*share.agent_args(), "--state-dir", str(state_dir)]
    return subprocess.Popen(cmd, env=env, start_new_session=True)


UP_PID = "HAL_UP_PID"  # the `hal up` that started this agent, which stops with it


def _stop_with_up() -> None:
    """An agent of `hal up` (its own session: Ctrl-C reaches `hal up`, which stops its
    agents in order) asks Linux for a SIGTERM when `hal up` dies without stopping it
    (SIGKILL, a crash): else it ran on unowned, holding its state directory's lock
    against the agents of the next `hal up`."""
    up = os.environ.pop(UP_PID, "")
    if not up.isdigit() or not sys.platform.startswith("linux"):
        return
    from hal.agent.prctl import PR_SET_PDEATHSIG, prctl

    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(up):  # it died before the call: nothing would signal us
        os.kill(os.getpid(), signal.SIGTERM)


def cmd_server(ns: argparse.Namespace) -> int:
    from hal.api.server import listen_socket
    from hal.server.control_plane import sqlite_url

    data_dir = Path(ns.data_dir).expanduser() if ns.data_dir else default_data_dir()
    db_url = ns.db or sqlite_url(_state_dir(data_dir))
    port = ns.port or DEFAULT_PORT
    config, source = _config(ns.config, data_dir)
    tls = server_tls(ns)
    from hal.observe.listener import metrics_security

    metrics_security(None, None, ns.metrics_token_file)
    url = _url(ns.host, port)
    if tls is not None:
        url = "https" + url[4:]
    elif not ns.insecure_http and not _loopback(ns.host):
        print(
            f"hal server: warning: plain HTTP on {ns.host}: tokens and job data cross the "
            "network unencrypted; serve TLS (--tls-cert/--tls-key, `hal certs init`), or "
            "pass --insecure-http on a network you trust",
            file=sys.stderr,
        )
    server = _server(config, source, db_url, data_dir, ns)
    # PostgreSQL: a second server stands by and takes over (hal.server.standby)
    server.leadership.standby = not ns.no_standby
    server.leadership.url = _advertised(ns, port, tls is not None)
    with (
        _claimed(server, db_url),  # another server on this database: refused first
        listen_socket(ns.host, port) as sock,  # before --init-admin prints a token
    ):
        if server.leadership.leading:
            token = _prepare_database(db_url, ns.init_admin)
            if token:
                print(f"created administrator {ns.init_admin}; token (shown once): {token}")
        else:  # the leader migrates and writes; a standby only checks it can connect
            _prepare_database(db_url, None, migrate=False)
            if ns.init_admin:
                print(
                    f"hal server: standing by, so --init-admin {ns.init_admin} is left "
                    "undone; give it to the leader, or run `hal user add "
                    f"{ns.init_admin} --admin` against it",
                    file=sys.stderr,
                )
        role = "" if server.leadership.leading else ", standing by: another server leads"
        print(f"HAL control plane on {url} (database {_redact(db_url)}{role})", flush=True)
        run_loop(server.serve(ns.host, port, sock=sock, tls=tls))
    if server.fenced:
        from hal.core.errors import Conflict

        raise Conflict(server.fenced)
    return 0


def _advertised(ns: argparse.Namespace, port: int, https: bool) -> str:
    """``--advertise-url``, checked, else the URL this server listens on by this host's
    name (``own_url``): what standbys send clients to while this server leads."""
    from hal.api.server import own_url

    given: str | None = ns.advertise_url
    if given is None:
        return own_url(ns.host, port, https=https)
    if not given.startswith(("http://", "https://")):
        raise InvalidRequest(
            f"--advertise-url {given!r} is no http:// or https:// URL; give the address "
            f"clients reach this server at, e.g. https://{socket.getfqdn()}:{port}",
            field="advertise_url",
        )
    return given.rstrip("/")


def server_tls(ns: argparse.Namespace) -> ServerTls | None:
    """``--tls-cert``/``--tls-key`` (and ``--client-ca``), checked now: a pair the server
    cannot use is one clear line before it starts."""
    from hal.host.tls import ServerTls, TlsSetupError, check_pair, server_context

    client_ca = getattr(ns, "client_ca", None)
    if not ns.tls_cert and not ns.tls_key:
        if client_ca:
            raise InvalidRequest(
                "--client-ca needs TLS: give --tls-cert and --tls-key too", field="client_ca"
            )
        return None
    if not (ns.tls_cert and ns.tls_key):
        raise InvalidRequest(
            "TLS needs both --tls-cert and --tls-key (`hal certs issue HOST` writes "
            "HOST.pem and HOST.key)",
            field="tls_cert",
        )
    try:
        check_pair(ns.tls_cert, ns.tls_key)
        if client_ca:
            server_context(ns.tls_cert, ns.tls_key, client_ca)
    except TlsSetupError as err:
        raise InvalidRequest(str(err), field="tls_cert") from None
    return ServerTls(ns.tls_cert, ns.tls_key, client_ca)


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _prepare_database(db_url: str, init_admin: str | None, *, migrate: bool = True) -> str | None:
    """Check that the database serves (``migrate``: and bring its schema up to date) and
    create ``init_admin``: its token, if new."""
    from hal.server.users import ensure_user
    from hal.state.store import SqlStateStore

    store = SqlStateStore(db_url)
    try:
        _check_database(store, db_url, migrate=migrate)
        if not init_admin:
            return None
        return ensure_user(store, init_admin, admin=True, now=time.time())
    finally:
        store.close()


@contextlib.contextmanager
def _claimed(server: HalServer, db_url: str) -> Iterator[None]:
    """The database's server lock for this command (``HalServer.claim``): a second server
    is one line, as a database that cannot serve; let go when the command returns, also
    when the server never started."""
    try:
        server.claim()
    except Exception as err:
        raise _unavailable(err, server.store.is_sqlite, db_url) from None
    try:
        yield
    finally:
        server.unclaim()


def _check_database(store: SqlStateStore, db_url: str, *, migrate: bool = True) -> None:
    """One round trip before starting: a database that cannot serve is one clear line
    (exit 6, as for any service unavailable), not uvicorn's traceback of a failed start.
    ``migrate``: bring the schema up to date too (not a standby's business: two servers
    starting at once on a fresh database would create the same tables)."""
    try:
        store.ping()
        if migrate:
            store.migrate()  # a write: a read-only file fails here, not in the server's start
    except Exception as err:
        raise _unavailable(err, store.is_sqlite, db_url) from None


def _unavailable(err: Exception, sqlite: bool, db_url: str) -> Exception:
    """``err`` as the one line a database that cannot serve is; any other error as is."""
    from hal.core.errors import Unavailable
    from hal.state.store import DatabaseUnavailable

    found = DatabaseUnavailable.of(err)
    if found is None:
        return err
    fix = "fix it" if sqlite else "start it or fix --db"
    return Unavailable(
        f"the database {_redact(db_url)} is unavailable: {found.reason}; {fix}, then "
        "start the server again"
    )


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _agent_security(ns: argparse.Namespace) -> None:
    """``--ca-file``, ``--tls-cert``/``--tls-key`` and the metrics listener's options, as
    the environment the agent's channel and listener read (``hal.host.tls``), checked
    now: a file the agent cannot use stops it here, not at its first request."""
    import ssl

    from hal.host.tls import CA_ENV, CERT_ENV, KEY_ENV, TlsSetupError, load_site
    from hal.observe.listener import metrics_security

    if bool(ns.tls_cert) != bool(ns.tls_key):
        raise InvalidRequest("give both --tls-cert and --tls-key", field="tls_cert")
    for name, value in ((CA_ENV, ns.ca_file), (CERT_ENV, ns.tls_cert), (KEY_ENV, ns.tls_key)):
        if value:
            os.environ[name] = value
    try:  # (the site's files only: the system's CA store is read at a first handshake)
        load_site(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    except TlsSetupError as err:
        raise InvalidRequest(str(err), field="ca_file") from None
    metrics_security(ns.metrics_tls_cert, ns.metrics_tls_key, ns.metrics_token_file)


def cmd_agent(ns: argparse.Namespace) -> int:
    from hal.agent.channel import CredentialRefused
    from hal.agent.config import AgentConfig
    from hal.agent.shell import run_agent
    from hal.core.gpu_islands import complete_islands, parse_gpu_islands
    from hal.core.node import parse_features
    from hal.core.topology_labels import parse_label
    from hal.observe.listener import parse_listen
    from hal.slurm.syntax import parse_memory

    if ns.cpu_list:  # first: every thread and process the agent starts inherits it
        bind_to(parse_cpu_list(ns.cpu_list))
    if ns.token:
        print(
            "hal agent: warning: --token shows the token to every user of this host "
            "(`ps`); use --token-file or HAL_TOKEN",
            file=sys.stderr,
        )
    _agent_security(ns)
    cfg = load_client_config(",".join(ns.server) if ns.server else None, ns.token)
    token = cfg.token
    if ns.token_file:
        try:
            token = Path(ns.token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not text"
            raise InvalidRequest(
                f"cannot read --token-file {ns.token_file} ({reason}); write the agent "
                "token there (`hal user add NAME --agent` prints one), readable by the "
                "agent's user only",
                field="token_file",
            ) from None
    if not token:
        raise InvalidRequest(
            "the agent needs a token: --token, --token-file or HAL_TOKEN", field="token"
        )
    kwargs: dict[str, object] = {
        "server_url": cfg.url,
        "token": token,
        "isolation": ns.isolation,
        "constrain_devices": ns.constrain_devices,
        "bind_cpus": ns.bind_cpus,
        "constrain_cores": ns.constrain_cores,
        "unknown_users_as_agent": ns.unknown_users_as_agent,
    }
    if ns.name:
        kwargs["node"] = ns.name
    if ns.cpus:
        kwargs["cpus"] = ns.cpus
    if ns.memory:
        kwargs["memory_bytes"] = parse_memory(ns.memory)
    if ns.gpus is not None:
        kwargs["gpus"] = ns.gpus
    if ns.artifact_cache:
        kwargs["artifact_cache_bytes"] = parse_memory(ns.artifact_cache)
    if ns.gpu_type:
        kwargs["gpu_model"] = ns.gpu_type
    if ns.gpu_islands:
        islands = parse_gpu_islands(ns.gpu_islands)
        if ns.gpus is not None:
            complete_islands(islands, ns.gpus)  # a clear error now, not at registration
        kwargs["gpu_islands"] = islands
    if ns.topology_label:
        kwargs["topology_labels"] = tuple(dict(map(parse_label, ns.topology_label)).items())
    if ns.nvlink_domain:
        kwargs["nvlink_domain"] = ns.nvlink_domain
    if ns.gpu_health_interval is not None:
        if ns.gpu_health_interval < 0:
            raise InvalidRequest(
                "--gpu-health-interval: seconds, at least 0 (0 = never)",
                field="gpu_health_interval",
            )
        kwargs["gpu_health_interval_seconds"] = ns.gpu_health_interval
    if ns.traffic_interval is not None:
        if ns.traffic_interval < 0:
            raise InvalidRequest(
                "--traffic-interval: seconds, at least 0 (0 = never)",
                field="traffic_interval",
            )
        kwargs["traffic_interval_seconds"] = ns.traffic_interval
    if ns.interruption_notice:
        if not ns.interruption_notice.startswith(("http://", "https://")):
            raise InvalidRequest(
                f"--interruption-notice: {ns.interruption_notice!r} is no http:// URL; give "
                "the instance metadata service's, e.g. http://169.254.169.254",
                field="interruption_notice",
            )
        kwargs["interruption_notice"] = ns.interruption_notice
    if ns.interruption_interval is not None:
        if ns.interruption_interval <= 0:
            raise InvalidRequest(
                "--interruption-interval: seconds, more than 0", field="interruption_interval"
            )
        kwargs["interruption_interval_seconds"] = ns.interruption_interval
    if ns.features:
        kwargs["features"] = parse_features(ns.features)
    if ns.state_dir:
        kwargs["state_dir"] = Path(ns.state_dir)
    if ns.metrics_listen is not None:  # "" turns off what HAL_AGENT_METRICS_LISTEN set
        try:  # a typo should stop the agent here, not only be logged once it runs
            if ns.metrics_listen:
                parse_listen(ns.metrics_listen)
        except ValueError as exc:
            raise InvalidRequest(
                f"--metrics-listen: {exc}, e.g. --metrics-listen :9471", field="metrics_listen"
            ) from None
        kwargs["metrics_listen"] = ns.metrics_listen
    config = AgentConfig(**kwargs)  # type: ignore[arg-type]

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        _stop_with_up()  # once SIGTERM stops the agent in order
        await run_agent(config, stop)

    try:
        run_loop(run())
    except CredentialRefused:  # logged by the agent, with what to do
        from hal.cli.main import EXIT_CODES

        return EXIT_CODES["unauthenticated"]  # 3, as for any command whose token is refused
    return 0
