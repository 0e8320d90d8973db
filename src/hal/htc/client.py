"""The HTC client API: open a session for a service, send tasks, get results.

    from hal import htc
    with htc.HtcClient() as hal:              # HAL_URL / HAL_TOKEN, like the SDK
        with hal.open_session("mypkg.pricing:price", common=curve, max_workers=8) as s:
            f = s.submit(42)                   # one task -> a future
            prices = list(s.map(portfolio))   # many tasks, results in order, bounded window
            for fut in htc.as_completed(s.submit_many([(1,), (2,)])):
                print(fut.task_id, fut.result())

Sessions can outlive the client: ``s.detach()`` leaves the session running (a crash, for
the broker's grace, 300 s by default), and ``HtcClient().attach(session_id).results()``
collects what it produced meanwhile. An exception out of the ``with`` block cancels the
session, unless it was opened with ``journal=True`` or detached once: then it detaches.

Given several servers (``HAL_URL=a,b``), the REST half goes to the leader among them, as
the SDK does (``hal.client.servers``), and the session's ticket names its broker. Two
channels: REST (through the control plane) opens, attaches, lists and cancels
sessions; tasks and results go over one TCP connection straight to the broker. A
background thread reads results and resolves futures; sending happens in the caller's
thread.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from pydantic import ValidationError

from hal.client.config import ClientConfig, load_client_config
from hal.client.problems import error_from_response
from hal.client.servers import FAILOVER_CONNECT_SECONDS, LeaderChoice, failover_timeout
from hal.client.sync import segment
from hal.core.errors import InvalidRequest, Unavailable
from hal.host.tls import verify_for_servers
from hal.htc.client_session import Session, pack_common
from hal.htc.rest import ServiceSpec, SessionInfo, SessionList, SessionOptions, SessionTicket


class HtcClient:
    """The REST half: open, attach, list, show and cancel sessions."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        config: ClientConfig | None = None,
    ) -> None:
        self.config = config or load_client_config(url, token)
        headers = {"User-Agent": "hal-htc-client", "Content-Type": "application/json"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        self._servers = LeaderChoice(self.config.urls)
        alone = len(self._servers.urls) == 1
        timeout = self.config.timeout_seconds
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(
                timeout, connect=timeout if alone else min(timeout, FAILOVER_CONNECT_SECONDS)
            ),
            # HAL_CA_FILE where any server is https; the CA store read only then
            verify=verify_for_servers(self._servers.urls),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HtcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send to the leader: past a server that refuses the connection (nothing was
        sent) or stands by, after a standby's redirect, for ``HAL_FAILOVER_TIMEOUT``."""
        limit = failover_timeout()
        started = time.monotonic()
        while True:
            rnd = self._servers.round()
            refused = ""  # one server that refused: said at once, as before failover
            while (url := rnd.next_url()) is not None:
                try:
                    response = self._http.request(method, url + path, **kwargs)
                except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                    rnd.failed(url, err.__class__.__name__)
                    refused = err.__class__.__name__
                    continue
                except httpx.TransportError as err:
                    raise Unavailable(
                        f"cannot reach the HAL server at {url} ({err.__class__.__name__})"
                    ) from err
                refused = ""
                if rnd.answered(url, response.status_code, response.headers):
                    if response.status_code >= 400:
                        raise error_from_response(response)
                    return response
            waited = time.monotonic() - started
            if refused and len(rnd.tried) == 1:
                raise Unavailable(f"cannot reach the HAL server at {self.config.url} ({refused})")
            if waited >= limit:
                raise Unavailable(rnd.summary(waited))
            time.sleep(min(1.0, limit - waited))

    def open_session(
        self,
        service: str | Sequence[str],
        *,
        common: Any = None,
        name: str = "",
        priority: int = 1,
        min_workers: int = 0,
        max_workers: int = 64,
        retries: int = 0,
        task_timeout: float | None = None,
        max_worker_deaths: int = 3,
        cpus_per_worker: int = 1,
        memory_per_worker: int | None = None,
        partition: str | None = None,
        python: str | None = None,
        workdir: str | None = None,
        environment: dict[str, str] | None = None,
        worker_output: str = "/dev/null",
        worker_lease: float = 600.0,
        journal: bool = False,
        reattach: float = 0.0,
    ) -> Session:
        """Open a session. ``service`` is ``"module:function"`` (each task calls
        ``function(*args)``) or an argv list of an executable speaking the length-prefixed
        protocol (``hal.htc.service``). ``common`` is sent once and read by tasks with
        ``hal.htc.common()``. Workers get this process's ``PYTHONPATH`` unless
        ``environment`` sets one. With ``journal``, the broker keeps the session's tasks and
        outcomes in a file, and a broker restart reopens the session instead of losing it.
        ``reattach`` (seconds, with ``journal``): when the connection is lost (the broker
        died, or a takeover moved it to another server), this client reattaches by itself
        for up to that long, and its open futures and maps carry on."""
        if isinstance(service, str):
            kind, argv, target = "python", [], service
        elif isinstance(service, (list, tuple)) and all(isinstance(a, str) for a in service):
            kind, argv, target = "exec", list(service), ""
        else:
            raise InvalidRequest(
                f"service: {service!r:.80} ({type(service).__name__}); give a Python "
                "function as 'package.module:function', or an executable's argv as a list "
                "of str, e.g. ['./pricer', '--fast']",
                field="service",
            )
        env = {"PYTHONPATH": default_pythonpath(), **(environment or {})}
        try:
            options = SessionOptions(
                service=ServiceSpec(kind=kind, target=target, argv=argv),
                name=name,
                priority=priority,
                min_workers=min_workers,
                max_workers=max_workers,
                retries=retries,
                task_timeout_seconds=task_timeout,
                max_worker_deaths=max_worker_deaths,
                cpus_per_worker=cpus_per_worker,
                memory_per_worker_bytes=memory_per_worker,
                partition=partition,
                python=python or sys.executable,
                workdir=workdir or os.getcwd(),
                environment=env,
                worker_output=worker_output,
                worker_lease_seconds=worker_lease,
                has_common_data=common is not None,
                journal=journal,
            )
        except ValidationError as err:
            raise option_error(err) from None
        check_workdir(options.workdir)
        packed = None if common is None else pack_common(common)
        r = self._request("POST", "/v1/htc/sessions", content=options.model_dump_json())
        ticket = SessionTicket.model_validate_json(r.content)
        return Session(
            ticket, packed, reattach=self._reattacher(ticket.session), reattach_s=reattach
        )

    def attach(self, session_id: str, *, reattach: float = 0.0) -> Session:
        """Reattach to a session this user opened (from any process); ``reattach`` as
        for ``open_session``."""
        again = self._reattacher(session_id)
        return Session(again(), reattach=again, reattach_s=reattach)

    def _reattacher(self, session_id: str) -> Callable[[], SessionTicket]:
        """What asks the leading server for a new ticket to ``session_id``."""

        def ticket() -> SessionTicket:
            r = self._request("POST", f"/v1/htc/sessions/{seg(session_id)}/attach")
            return SessionTicket.model_validate_json(r.content)

        return ticket

    def sessions(self, *, include_ended: bool = False) -> list[SessionInfo]:
        params = {"all": "true"} if include_ended else {}
        r = self._request("GET", "/v1/htc/sessions", params=params)
        return SessionList.model_validate_json(r.content).sessions

    def session(self, session_id: str) -> SessionInfo:
        r = self._request("GET", f"/v1/htc/sessions/{seg(session_id)}")
        return SessionInfo.model_validate_json(r.content)

    def cancel(self, session_id: str) -> SessionInfo:
        r = self._request("DELETE", f"/v1/htc/sessions/{seg(session_id)}")
        return SessionInfo.model_validate_json(r.content)


# ``SessionOptions`` fields under the names ``open_session`` takes
PARAMETERS = {
    "task_timeout_seconds": "task_timeout",
    "memory_per_worker_bytes": "memory_per_worker",
    "worker_lease_seconds": "worker_lease",
    "service": "service",
}


def option_error(err: ValidationError) -> InvalidRequest:
    """An option pydantic refused, as the ``InvalidRequest`` the server's own checks
    raise (code that catches ``HalError`` sees both), naming ``open_session``'s
    parameter, the value and what it must be."""
    first = err.errors()[0]
    loc = [str(part) for part in first["loc"]]
    field = PARAMETERS.get(loc[0], loc[0]) if loc else "options"
    path = ".".join([field, *loc[1:]])
    what = str(first["msg"])
    what = what[:1].lower() + what[1:]
    return InvalidRequest(f"{path}: {first.get('input')!r:.80}: {what}", field=field)


def check_workdir(path: str) -> None:
    """Refuse a ``workdir`` this host cannot enter before any worker starts. A worker job
    whose working directory is missing runs in /tmp, as Slurm's batch step does (it says
    so only in the job's output, ``worker_output``: /dev/null by default), so the service
    ran elsewhere without a word. A worker that still cannot enter it (a node without
    the client's file system) fails to start, saying so (``worker.run``). A relative or
    malformed path is left to the server's checks, which name it."""
    if "\x00" in path or not os.path.isabs(path):
        return
    if os.path.isdir(path) and os.access(path, os.X_OK):
        return
    if not os.path.exists(path):
        why = "does not exist"
    elif not os.path.isdir(path):
        why = "is not a directory"
    else:
        why = "cannot be entered (no search permission)"
    raise InvalidRequest(
        f"workdir: {path!r} {why} on this host ({socket.gethostname()}); the workers run "
        "the service there: create it, or pass workdir= a directory the worker nodes "
        "share",
        field="workdir",
    )


def seg(session_id: str) -> str:
    """One URL segment: a typed id with a control character, '?' or '/' is a 404 or a
    clear refusal, not an httpx traceback or another route."""
    return segment(session_id, "session id", "hal htc sessions --all")


def default_pythonpath() -> str:
    """This process's import path (directories only), so workers import what it imports."""
    seen: list[str] = []
    for entry in [os.getcwd(), *sys.path]:
        path = os.path.abspath(entry or os.getcwd())
        if os.path.isdir(path) and path not in seen and not path.startswith(sys.base_prefix):
            seen.append(path)
    return os.pathsep.join(seen)
