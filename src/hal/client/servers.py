"""Which of several HAL servers to talk to: the leader, found and followed.

A site may run ``hal server`` two or three times on one PostgreSQL: one leads, the others
stand by (docs/admin/failover.md). Every client is given all their addresses
(``HAL_URL=https://a:8470,https://b:8470``, ``hal agent --server A --server B``) and must
find the leader among them, and find it again after a takeover. The rules, shared by the
SDK, the agents, ``hal emulate`` and HTC's clients:

- try the address that last answered as the leader first, then the others in the order
  given (``LeaderChoice.order``);
- move on to the next at a connection that fails, or a 503 whose ``X-HAL-Role`` is
  ``standby`` or ``starting`` (a standby that knows no leader yet);
- follow a ``307`` carrying ``X-HAL-Leader`` (a standby naming the leader) with the same
  method and body, even to an address not in the list (the leader's advertised URL, with
  the path the address had: ``https://b:8470/cache/v1`` goes to ``LEADER/cache/v1``);
- anything else is the leader's answer (a server from before failover, which sends no
  ``X-HAL-Role``, counts as one).

``Round`` is one pass over the addresses, sans-IO: the caller sends, tells the round what
came back, and asks where to go next, so the blocking SDK and the asyncio agent share one
rule and each keeps its own I/O. How many rounds, and how long, is the caller's: the SDK
retries for ``HAL_FAILOVER_TIMEOUT`` seconds (``failover_timeout``), an agent for ever
with its own backoff.

Each command is a new process, so the SDK also keeps the last leader of each address list
in ``~/.cache/hal/leader.json`` (``LeaderCache``): the next command goes there first
instead of waiting on a dead first address (a host that drops packets costs a connect
limit each time). Only for a list of several: one address has nothing to remember.

Imports nothing at module level but ``os``: every ``hal sbatch`` loads it (``hal.client``).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (no ``typing`` at run time: see ``hal.client``)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

FAILOVER_TIMEOUT_SECONDS = 30.0
# A connect to one address of several waits at most this long: a host that stopped
# answering (its packets dropped) must not hold the client for its whole request limit
# while another address leads.
FAILOVER_CONNECT_SECONDS = 5.0
MAX_REDIRECTS = 3  # a round follows at most this many 307s (a stale leader URL loops)
_STANDBY_ROLES = ("standby", "starting")

# The last leader of each address list, for this process: a client made after a takeover
# goes to the new leader first instead of the dead one.
_LEADERS: dict[tuple[str, ...], str] = {}


def server_urls(given: str | Iterable[str]) -> tuple[str, ...]:
    """The addresses in ``given``: a comma-separated list (HAL_URL) or several of them
    (repeated ``--server``), blanks dropped, each without a trailing ``/``, each once, in
    their order."""
    texts = [given] if isinstance(given, str) else list(given)
    urls: list[str] = []
    for text in texts:
        for part in text.split(","):
            url = part.strip().rstrip("/")
            if url and url not in urls:
                urls.append(url)
    return tuple(urls)


def failover_timeout() -> float:
    """``HAL_FAILOVER_TIMEOUT``: how long a client looks for a leader before it gives up
    (default 30 s: a takeover takes under 10)."""
    from hal.client.config import env_seconds

    return env_seconds(
        "HAL_FAILOVER_TIMEOUT",
        FAILOVER_TIMEOUT_SECONDS,
        "how long to look for the leader among HAL_URL's servers",
    )


def not_leading(status: int, headers: Mapping[str, str]) -> str | None:
    """Why an answer is not the leader's (``"redirect"``: a 307 naming the leader,
    ``"standby"``: a 503 of a standby that knows none), else None. ``headers``: names in
    lower case, or a mapping that ignores their case (httpx's)."""
    if status == 307 and headers.get("x-hal-leader"):
        return "redirect"
    if status == 503 and headers.get("x-hal-role") in _STANDBY_ROLES:
        return "standby"
    return None


class LeaderChoice:
    """The addresses of one client, and which of them leads as far as it knows."""

    __slots__ = ("_key", "urls")

    def __init__(self, urls: Iterable[str]) -> None:
        self.urls = server_urls(urls)
        if not self.urls:
            raise ValueError("no server address given")
        self._key = self.urls

    @property
    def leader(self) -> str | None:
        """The address that last answered as the leader (in this process), if any."""
        return _LEADERS.get(self._key)

    @property
    def current(self) -> str:
        """Where the next request goes first: the last leader, else the first address."""
        return _LEADERS.get(self._key) or self.urls[0]

    def order(self) -> list[str]:
        leader = _LEADERS.get(self._key)
        if leader is None:
            return list(self.urls)
        return [leader, *(url for url in self.urls if url != leader)]

    def lead(self, url: str) -> None:
        """``url`` answered as the leader: go there first from now on."""
        _LEADERS[self._key] = url

    def passed(self, url: str) -> None:
        """``url`` failed or stands by: no longer try it first."""
        if _LEADERS.get(self._key) == url:
            del _LEADERS[self._key]

    def round(self) -> Round:
        return Round(self)


class LeaderCache:
    """The last leader of each address list, kept between commands in
    ``$XDG_CACHE_HOME/hal/leader.json`` (``{"a,b": "b"}``). A hint only: a file that
    cannot be read or written is ignored, and a stale entry costs one failed try."""

    __slots__ = ("_choice", "_known")

    def __init__(self, choice: LeaderChoice) -> None:
        self._choice = choice
        self._known: str | None = None
        if choice.leader is None:
            leader = self._read().get(",".join(choice.urls))
            if isinstance(leader, str) and leader:
                choice.lead(leader)
                self._known = leader
        else:
            self._known = choice.leader

    def save(self) -> None:
        """Write the choice's leader if it changed since it was read or last written."""
        leader = self._choice.leader
        if leader is None or leader == self._known:
            return
        self._known = leader
        data = self._read()
        data[",".join(self._choice.urls)] = leader
        path = _cache_file()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            from hal.client import cjson

            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(cjson.dumps(data, compact=True))
            os.replace(tmp, path)
        except OSError:
            pass  # (a hint: the next command finds the leader again)

    @staticmethod
    def _read() -> dict[str, object]:
        from hal.client import cjson

        try:
            with open(_cache_file(), "rb") as f:
                data = cjson.loads(f.read())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def _path_of(url: str) -> str:
    """The path an address carries after its host (``/cache/v1`` of a cache control
    plane inside the server), kept when a redirect names the leader by its bare URL."""
    rest = url.partition("://")[2]
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else ""


def _cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hal", "leader.json")


class Round:
    """One pass over a client's addresses, sans-IO::

    rnd = choice.round()
    while (url := rnd.next_url()) is not None:
        try:
            response = send(url)
        except ConnectionError as err:
            rnd.failed(url, str(err))
            continue
        if rnd.answered(url, response.status, response.headers):
            return response
    raise Unavailable(rnd.summary(waited))
    """

    __slots__ = ("_choice", "_queue", "_redirects", "tried")

    def __init__(self, choice: LeaderChoice) -> None:
        self._choice = choice
        self._queue = choice.order()
        self._redirects = 0
        self.tried: list[tuple[str, str]] = []  # (address, what it answered)

    def next_url(self) -> str | None:
        """The next address to send to, or None: every one was tried."""
        return self._queue.pop(0) if self._queue else None

    @property
    def pending(self) -> bool:
        """Whether an address is left to try in this round (a redirect's target too)."""
        return bool(self._queue)

    def failed(self, url: str, why: str) -> None:
        """Sending to ``url`` failed before it answered (refused, reset, timed out)."""
        self._choice.passed(url)
        self.tried.append((url, why))

    def answered(self, url: str, status: int, headers: Mapping[str, str]) -> bool:
        """``url`` answered ``status``: True if that is the answer to hand back (the
        leader's, or a standby's own for the few paths it serves), False to go on."""
        why = not_leading(status, headers)
        if why is None:
            if headers.get("x-hal-role") not in _STANDBY_ROLES:
                self._choice.lead(url)
            return True
        self._choice.passed(url)
        if why == "standby":
            role = headers.get("x-hal-role")
            self.tried.append((url, f"{role}, no leader answering yet (503)"))
            return False
        leader = server_urls(headers.get("x-hal-leader", ""))
        target = leader[0] + _path_of(url) if leader else ""
        self.tried.append((url, f"standby, the leader is at {target} (307)"))
        if target and target != url and self._redirects < MAX_REDIRECTS:
            self._redirects += 1
            if target in self._queue:
                self._queue.remove(target)
            self._queue.insert(0, target)
        return False

    def summary(self, waited: float | None = None) -> str:
        """Every address and what it last answered, for the error that ends the search."""
        last: dict[str, str] = {}
        for url, why in self.tried:
            last[url] = why
        seen = "; ".join(f"{url}: {why}" for url, why in last.items())
        within = f" within {waited:.0f} s (HAL_FAILOVER_TIMEOUT)" if waited is not None else ""
        return f"no HAL server answered as the leader{within}: {seen}"
