"""The Lambda Cloud provider: one Lambda GPU instance per node, found again by its name.

Written against Lambda Cloud's published API contract (OpenAPI "Lambda Cloud API"
1.5.3): ``GET /instance-types`` (prices, and the regions with capacity now),
``POST /instance-operations/launch``, ``GET /instances`` and
``POST /instance-operations/terminate``, with the API key as a bearer token.

The contract gives an instance no tags and no launch time, only a ``name`` (at most 64
characters), so the name is the record: ``hal/CLUSTER/GROUP/NODE/LAUNCHED`` (the launch's
Unix time), and listing keeps the instances whose names start with this cluster's and
group's prefix. The contract has no idempotency key either: ``create`` lists first and
returns the instance a name already has (a create retried after its answer was lost
launches nothing new).

Launching tries the group's regions in order, skipping those the instance-type list
says have no capacity and those that answer ``insufficient-capacity``; when none has
room it raises ``CapacityError``, and the autoscaler tries the next group.

The contract's launch request carries no user data: the group's ``bootstrap`` program
(``hal.cloud.bootstrap``) starts each instance's agent once Lambda lists it active with
an address, e.g. over SSH.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from hal.cloud.bootstrap import Bootstrap
from hal.cloud.provider import (
    PENDING,
    RUNNING,
    STOPPING,
    CapacityError,
    Instance,
    Launch,
    Price,
    ProviderError,
    check_known_settings,
)
from hal.core.errors import InvalidRequest, did_you_mean
from hal.core.node_groups import NodeGroup

log = logging.getLogger("hal.cloud.lambda")

ENDPOINT = "https://cloud.lambdalabs.com/api/v1"  # the contract's production server
KEY_ENV = "LAMBDA_API_KEY"
REQUIRED = ("instance_type", "regions", "ssh_key_names")
OPTIONAL = (
    "api_key_file",  # a file holding the API key (default: $LAMBDA_API_KEY)
    "endpoint_url",  # another endpoint (a mock server in tests)
    "file_system_name",  # a file system to attach (in the instance's region)
    "timeout_seconds",  # how long one call may take (default 30)
    "bootstrap",  # a program started for each instance once active (hal.cloud.bootstrap)
)
KNOWN = REQUIRED + OPTIONAL
NAME_MAX = 64  # the contract's longest instance name
CAPACITY_CODE = "instance-operations/launch/insufficient-capacity"
GONE_CODE = "global/object-does-not-exist"
# an instance's status → the provider protocol's; "terminated" ones are gone
STATES = {"booting": PENDING, "active": RUNNING, "unhealthy": RUNNING, "terminating": STOPPING}


@dataclass(frozen=True, slots=True)
class Offer:
    """An instance type as ``GET /instance-types`` lists it."""

    name: str
    cents_per_hour: int
    regions: tuple[str, ...]  # with capacity now


class LambdaError(ProviderError):
    """Lambda answered with an error (``code``: the contract's error code, "" if none)."""

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class LambdaProvider:
    """Creates, lists and removes the Lambda Cloud instances of one node group of one
    cluster. ``client``: an ``httpx.Client`` to send through (tests add hooks); by
    default one of its own. ``state_dir``: the provider's folder on the server (the
    bootstrap's records)."""

    def __init__(
        self,
        group: NodeGroup,
        cluster: str,
        client: httpx.Client | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.group = group
        self.cluster = cluster
        self.settings = _checked_settings(group)
        self.regions = tuple(r.strip() for r in self.settings["regions"].split(",") if r.strip())
        self.prefix = f"hal/{cluster}/{group.name}/"
        longest = max(len(n) for n in group.nodes) if group.nodes else 0
        if len(self.prefix) + longest + 11 > NAME_MAX:
            raise InvalidRequest(
                f"[cloud.groups.lambda] of group {group.name!r}: Lambda names an instance "
                f"with at most {NAME_MAX} characters, and HAL's names "
                f"({self.prefix}NODE/LAUNCHED) would be longer: shorten the cluster name, "
                "the group's name or its node names",
                field=f"cloud.groups.{group.name}.nodes",
            )
        self._key = _api_key(group, self.settings)
        timeout = float(self.settings.get("timeout_seconds", "30"))
        self._timeout = httpx.Timeout(timeout, connect=min(5.0, timeout))
        self._base = (self.settings.get("endpoint_url") or ENDPOINT).rstrip("/")
        self._client = client or httpx.Client(timeout=self._timeout)
        self._where = f"Lambda Cloud (group {group.name})"
        self.bootstrap: Bootstrap | None = None
        if self.settings.get("bootstrap"):
            setting = f"cloud.groups.{group.name}.lambda.bootstrap"
            if state_dir is None:
                raise InvalidRequest(f"{setting}: needs the server's data directory")
            self.bootstrap = Bootstrap(group, self.settings["bootstrap"], state_dir, setting)

    def create(self, names: Sequence[str], launch: Launch) -> list[Instance]:
        """One launch per name, in the first of the group's regions with room. A name
        that has an instance already gets that one back. A failure stops the rest: the
        instances started are returned, the failure raised only when none started."""
        if not names:
            return []
        if self.bootstrap is not None:
            self.bootstrap.remember(launch)
        offer = self._offer()
        have = {i.node: i for i in self.instances() if i.state != STOPPING}
        started: list[Instance] = []
        for name in names:
            try:
                started.append(have.get(name) or self._launch(name, offer))
            except ProviderError as err:
                if not started:
                    raise
                log.warning("%s; %d of %d started", err, len(started), len(names))
                break
        return started

    def instances(self) -> list[Instance]:
        """This cluster's and group's instances not yet terminated, from their names;
        the bootstrap started for those newly active."""
        body = self._call("GET", "/instances", what="could not list instances")
        found: list[tuple[Instance, str]] = []
        for raw in _items(body, "data"):
            instance = self._instance(raw)
            if instance is not None:
                ip = raw.get("ip")
                found.append((instance, ip if isinstance(ip, str) else ""))
        if self.bootstrap is not None:
            self.bootstrap.run(found)
        return [instance for instance, _ in found]

    def remove(self, instances: Sequence[Instance]) -> None:
        """Terminate the instances in one call; when Lambda knows one of them no more,
        each alone, skipping the gone."""
        ids = [i.id for i in instances]
        if not ids:
            return
        try:
            self._terminate(ids)
        except LambdaError as err:
            if err.code != GONE_CODE and err.status != 404:
                raise
            for instance_id in ids if len(ids) > 1 else []:
                try:
                    self._terminate([instance_id])
                except LambdaError as one:
                    if one.code != GONE_CODE and one.status != 404:
                        raise

    def prices(self) -> list[Price]:
        """The group's instance type's price, as ``GET /instance-types`` gives it now."""
        offer = self._offer()
        return [
            Price(
                group=self.group.name,
                price_per_hour=offer.cents_per_hour / 100,
                source=f"lambda instance types ({offer.name})",
                observed_at=time.time(),
            )
        ]

    def offers(self) -> dict[str, Offer]:
        """Every instance type Lambda offers, with its price and the regions that have
        capacity for it now."""
        body = self._call("GET", "/instance-types", what="could not read the instance types")
        data = body.get("data")
        if not isinstance(data, dict):
            raise ProviderError(f"{self._where}: the instance types answer has no data: {body}")
        return {name: _offer(name, entry, self._where) for name, entry in data.items()}

    def _offer(self) -> Offer:
        offers = self.offers()
        kind = self.settings["instance_type"]
        if kind not in offers:
            raise ProviderError(
                f"{self._where}: Lambda offers no instance type {kind!r}"
                f"{did_you_mean(kind, offers)}; it offers {', '.join(sorted(offers))} "
                f"(set instance_type in [cloud.groups.lambda])"
            )
        return offers[kind]

    def _launch(self, name: str, offer: Offer) -> Instance:
        """Launch ``name`` in the first region that has room; CapacityError where none."""
        tried: list[str] = []
        for region in self.regions:
            if region not in offer.regions:
                tried.append(f"{region} (none listed)")
                continue
            now = time.time()
            request: dict[str, Any] = {
                "region_name": region,
                "instance_type_name": offer.name,
                "ssh_key_names": [self.settings["ssh_key_names"].strip(" ,")],
                "quantity": 1,
                "name": f"{self.prefix}{name}/{int(now)}",
            }
            if self.settings.get("file_system_name"):
                request["file_system_names"] = [self.settings["file_system_name"]]
            try:
                body = self._call(
                    "POST",
                    "/instance-operations/launch",
                    json=request,
                    what=f"could not launch node {name} in {region}",
                )
            except LambdaError as err:
                if err.code != CAPACITY_CODE:
                    raise
                tried.append(f"{region} (insufficient capacity)")
                continue
            data = body.get("data")
            ids = data.get("instance_ids") if isinstance(data, dict) else None
            if not isinstance(ids, list) or not ids or not isinstance(ids[0], str):
                raise ProviderError(
                    f"{self._where}: launching node {name} in {region} gave no instance id: {body}"
                )
            return Instance(ids[0], name, self.group.name, PENDING, float(int(now)))
        raise CapacityError(
            f"{self._where}: no capacity for {offer.name} to start node {name}: tried "
            f"{', '.join(tried)}; it has capacity in {', '.join(offer.regions) or 'no region'}"
        )

    def _terminate(self, ids: list[str]) -> None:
        self._call(
            "POST",
            "/instance-operations/terminate",
            json={"instance_ids": ids},
            what=f"could not remove {', '.join(ids)}",
        )

    def _instance(self, raw: Any) -> Instance | None:
        """The protocol's instance of a listed one; None where it is not this group's
        (another name), or is gone. A node name the group no longer has is kept: the
        server retires such instances."""
        if not isinstance(raw, dict):
            return None
        name = raw.get("name")
        status = raw.get("status")
        if not isinstance(name, str) or not name.startswith(self.prefix):
            return None
        node, _, stamp = name[len(self.prefix) :].rpartition("/")
        if not node or status not in STATES or not stamp.isdigit():
            return None
        return Instance(str(raw.get("id", "")), node, self.group.name, STATES[status], float(stamp))

    def _call(
        self, method: str, path: str, what: str, json: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """One API call; its JSON body, or a ProviderError that says what went wrong."""
        where = f"{self._where}: {what}"
        try:
            reply = self._client.request(
                method,
                self._base + path,
                json=json,
                headers={"Authorization": f"Bearer {self._key}"},
                timeout=self._timeout,
            )
        except httpx.TimeoutException as err:
            raise ProviderError(
                f"{where}: no answer within {self._timeout.read:g} s ({method} {path}: "
                f"{type(err).__name__})"
            ) from err
        except httpx.HTTPError as err:
            raise ProviderError(f"{where}: {self._base} unreachable: {err}") from err
        try:
            body = reply.json()
        except ValueError:
            body = None
        if reply.is_success and isinstance(body, dict):
            return body
        raise _error(where, reply.status_code, body, reply.text)


def _error(where: str, status: int, body: Any, text: str) -> LambdaError:
    """The contract's error body (code, message, suggestion) as a LambdaError."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        if 200 <= status < 300:
            return LambdaError(f"{where}: the answer is not a JSON object: {text[:200]!r}")
        return LambdaError(f"{where}: HTTP {status}: {text[:200]!r}", status=status)
    code = str(error.get("code", ""))
    message = f"{where}: HTTP {status} {code}: {error.get('message', '')}"
    if error.get("suggestion"):
        message += f" ({error['suggestion']})"
    if status in (401, 403):
        message += f" (check the API key: ${KEY_ENV} or api_key_file)"
    return LambdaError(message, code, status)


def _offer(name: str, entry: Any, where: str) -> Offer:
    """An instance type entry: its price (the contract says integer cents; its own
    example writes a string of digits, taken too) and regions with capacity."""
    kind = entry.get("instance_type") if isinstance(entry, dict) else None
    cents = kind.get("price_cents_per_hour") if isinstance(kind, dict) else None
    if isinstance(cents, str) and cents.strip().isdigit():
        cents = int(cents)
    if isinstance(cents, bool) or not isinstance(cents, int) or cents < 0:
        raise ProviderError(f"{where}: instance type {name} has no price in cents: {entry}")
    regions = entry.get("regions_with_capacity_available", [])
    names = tuple(
        str(r["name"]) for r in regions if isinstance(r, dict) and isinstance(r.get("name"), str)
    )
    return Offer(name, cents, names)


def _items(body: Mapping[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    return value if isinstance(value, list) else []


def _checked_settings(group: NodeGroup) -> dict[str, str]:
    where = f"[cloud.groups.lambda] of group {group.name!r}"
    if group.provider != "lambda":
        raise InvalidRequest(f"group {group.name!r} has provider {group.provider!r}, not lambda")
    check_known_settings(group, KNOWN)
    examples = {
        "instance_type": 'instance_type = "gpu_1x_a100"',
        "regions": 'regions = ["us-tx-1", "us-az-1"] (tried in this order)',
        "ssh_key_names": 'ssh_key_names = ["hal"] (a key added to the Lambda account)',
    }
    for key in REQUIRED:
        if not group.settings.get(key, "").strip(" ,"):
            raise InvalidRequest(
                f"{where}: {key!r} is required: write {examples[key]}",
                field=f"cloud.groups.{group.name}.lambda.{key}",
            )
    if "," in group.settings["ssh_key_names"].strip(" ,"):
        raise InvalidRequest(
            f"{where}: ssh_key_names: Lambda takes exactly one key per instance (its API "
            'allows one): write ssh_key_names = ["hal"]',
            field=f"cloud.groups.{group.name}.lambda.ssh_key_names",
        )
    timeout = group.settings.get("timeout_seconds", "30")
    try:
        ok = 0 < float(timeout) <= 600
    except ValueError:
        ok = False
    if not ok:
        raise InvalidRequest(
            f"{where}: timeout_seconds must be a number of seconds, 0 < s <= 600 (got {timeout!r})",
            field=f"cloud.groups.{group.name}.lambda.timeout_seconds",
        )
    url = group.settings.get("endpoint_url", "")
    if url and not url.startswith(("http://", "https://")):
        raise InvalidRequest(
            f'{where}: endpoint_url must be a URL like "{ENDPOINT}" (got {url!r})',
            field=f"cloud.groups.{group.name}.lambda.endpoint_url",
        )
    return dict(group.settings)


def _api_key(group: NodeGroup, settings: Mapping[str, str]) -> str:
    """The API key: the ``api_key_file``'s first line, else ``$LAMBDA_API_KEY``."""
    field = f"cloud.groups.{group.name}.lambda.api_key_file"
    if settings.get("api_key_file"):
        path = Path(settings["api_key_file"]).expanduser()
        try:
            key = path.read_text().strip()
        except OSError as err:
            raise InvalidRequest(
                f"[cloud.groups.lambda] of group {group.name!r}: cannot read api_key_file "
                f"{path}: {err.strerror}",
                field=field,
            ) from None
    else:
        key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        raise InvalidRequest(
            f"[cloud.groups.lambda] of group {group.name!r}: no API key: set {KEY_ENV} in "
            "the server's environment, or api_key_file to a file holding the key",
            field=field,
        )
    return key
