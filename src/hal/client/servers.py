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
  ``X-HAL-Role``, counts as one);
- learn the servers an answer names in ``X-HAL-Servers`` (every live server of the
  database, which each server reads from the others' heartbeats): they are tried after
  the addresses given, which stay first and in their order (``LeaderChoice.learn``).
  So a client given one address finds the others when that one dies. A server's list
  replaces the last one learned (a server gone from it is no longer tried); an answer
  without the header (SQLite, a server from before) changes nothing.

``Round`` is one pass over the addresses, sans-IO: the caller sends, tells the round what
came back, and asks where to go next, so the blocking SDK and the asyncio agent share one
rule and each keeps its own I/O. How many rounds, and how long, is the caller's: the SDK
retries for ``HAL_FAILOVER_TIMEOUT`` seconds (``failover_timeout``), an agent for ever
with its own backoff.

Each command is a new process, so the SDK also keeps the last leader of each address list
in ``~/.cache/hal/leader.json`` (``LeaderCache``): the next command goes there first
instead of waiting on a dead first address (a host that drops packets costs a connect
limit each time), and the servers it learned, so that a command given one address
reaches the others after that one died. A client given one address reads the file only
once that address fails or names other servers: a site with one server pays nothing.

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
LEARNED_KEY = "learned"  # the learned servers' entry of the cache file
MAX_LEARNED = 16  # an X-HAL-Servers list is read this far (a site has two or three)
_STANDBY_ROLES = ("standby", "starting")

# The last leader of each address list, for this process: a client made after a takeover
# goes to the new leader first instead of the dead one.
_LEADERS: dict[tuple[str, ...], str] = {}
# The servers each address list learned (``X-HAL-Servers``), for this process.
_LEARNED: dict[tuple[str, ...], tuple[str, ...]] = {}


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


def learned_urls(header: str, path: str = "") -> tuple[str, ...]:
    """The addresses an ``X-HAL-Servers`` value names (the first ``MAX_LEARNED``, only
    http:// and https:// ones), each with ``path`` (the path of the address that
    answered, as a redirect keeps it)."""
    urls = server_urls(header)[:MAX_LEARNED]
    return tuple(url + path for url in urls if url.startswith(("http://", "https://")))


class LeaderChoice:
    """The addresses of one client, and which of them leads as far as it knows: the
    ones it was given (``urls``), then the ones it learned (``learned``)."""

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

    @property
    def learned(self) -> tuple[str, ...]:
        """The addresses learned from the servers (``X-HAL-Servers``), not given."""
        return _LEARNED.get(self._key, ())

    def order(self) -> list[str]:
        """The addresses in the order a round tries them: the last leader, then those
        given, in their order, then those learned."""
        leader = _LEADERS.get(self._key)
        found = [leader] if leader is not None else []
        for url in (*self.urls, *self.learned):
            if url not in found:
                found.append(url)
        return found

    def learn(self, urls: Iterable[str]) -> bool:
        """The servers named by an answer: those not given become the learned ones (in
        place of the last learned). True when that changed them."""
        learned = tuple(url for url in dict.fromkeys(urls) if url not in self.urls)
        if learned == self.learned:
            return False
        if learned:
            _LEARNED[self._key] = learned
        else:
            _LEARNED.pop(self._key, None)
        return True

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
    """The last leader of each address list, and the servers it learned, kept between
    commands in ``$XDG_CACHE_HOME/hal/leader.json``
    (``{"a": "b", "learned": {"a": ["b", "c"]}}``). A hint only: a file that cannot be
    read or written is ignored, and a stale entry costs one failed try."""

    __slots__ = ("_choice", "_known", "_known_learned")

    def __init__(self, choice: LeaderChoice) -> None:
        self._choice = choice
        self._known: str | None = None
        key = ",".join(choice.urls)
        data = self._read() if choice.leader is None or not choice.learned else {}
        if choice.leader is None:
            leader = data.get(key)
            if isinstance(leader, str) and leader:
                choice.lead(leader)
                self._known = leader
        else:
            self._known = choice.leader
        if not choice.learned:
            kept = data.get(LEARNED_KEY)
            urls = kept.get(key) if isinstance(kept, dict) else None
            if isinstance(urls, list):
                choice.learn(learned_urls(",".join(u for u in urls if isinstance(u, str))))
        self._known_learned = choice.learned

    def save(self) -> None:
        """Write the choice's leader and learned servers if they changed since they were
        read or last written."""
        leader, learned = self._choice.leader, self._choice.learned
        new_leader = leader is not None and leader != self._known
        if not new_leader and learned == self._known_learned:
            return
        self._known, self._known_learned = leader or self._known, learned
        data = self._read()
        key = ",".join(self._choice.urls)
        if leader is not None:
            data[key] = leader
        kept = data.get(LEARNED_KEY)
        kept = kept if isinstance(kept, dict) else {}
        if learned:
            kept[key] = list(learned)
        else:
            kept.pop(key, None)
        if kept:
            data[LEARNED_KEY] = kept
        else:
            data.pop(LEARNED_KEY, None)
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

    def skip(self, url: str) -> None:
        """``url`` was sent to outside the round (a client's first try): not again."""
        if url in self._queue:
            self._queue.remove(url)

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
        leader's, or a standby's own for the few paths it serves), False to go on. The
        servers it names (``X-HAL-Servers``) are learned, and those new to this round
        are tried after the rest."""
        named = headers.get("x-hal-servers")
        if named:
            self._learn(url, learned_urls(named, _path_of(url)))
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

    def _learn(self, answering: str, urls: tuple[str, ...]) -> None:
        if not self._choice.learn(urls):
            return
        tried = {answering, *(url for url, _ in self.tried)}
        for url in self._choice.learned:
            if url not in tried and url not in self._queue:
                self._queue.append(url)

    def summary(self, waited: float | None = None) -> str:
        """Every address and what it last answered, for the error that ends the search."""
        last: dict[str, str] = {}
        for url, why in self.tried:
            last[url] = why
        seen = "; ".join(f"{url}: {why}" for url, why in last.items())
        within = f" within {waited:.0f} s (HAL_FAILOVER_TIMEOUT)" if waited is not None else ""
        return f"no HAL server answered as the leader{within}: {seen}"
