"""``[cloud]`` of ``hal.toml``: node groups the autoscaler creates nodes in on demand.

Example (Slurm's cloud nodes, ``State=CLOUD`` with ``ResumeProgram``/``SuspendTime``,
as groups of one machine kind each)::

    [cloud]
    interval_seconds = 10          # how often the autoscaler looks (default 10)
    pending_seconds = 10           # no job gets new nodes before it has waited this long
    server_url = ""                # the URL new nodes' agents join (default: the server's);
                                   # several, comma-separated, for servers with standbys
    ca_file = ""                   # the CA new nodes trust for an https server (default:
                                   # the server's HAL_CA_FILE); its PEM goes in their launch
    price_interval_seconds = 300   # how often prices are read from providers that publish them
    burst_after = "0"              # a job's patience without --burst-after (hal.cloud.burst)
    burst_after_by_qos = { scavenger = "never" }

    [[cloud.groups]]
    name = "burst"
    provider = "ec2"               # "ec2", "lambda" (Lambda Cloud), or "local" (agents here)
    nodes = "burst[1-8]"           # the names its nodes take: at most 8 nodes
    cpus = 4
    memory = "16G"                 # as --mem: MiB, or with K, M, G or T
    gpus = 0
    gpu_type = ""                  # e.g. "nvidia_a100" for --gres=gpu:a100:1
    features = ["cloud"]           # for --constraint
    price_per_hour = 0.17          # USD; the provider's published price wins where it has one
    market = "on_demand"           # or "spot" (ec2, local): interruptible, taken back at a notice
    max_price = 0                  # spot: the most paid an hour; 0: up to the on-demand price
    boot_seconds = 120             # expected time to join, until joins are seen
    idle_seconds = 300             # an idle node is removed (Slurm's SuspendTime)
    boot_timeout_seconds = 300     # a node not joined by then is removed (ResumeTimeout)
    [cloud.groups.ec2]             # the provider's own settings (docs/admin/cloud.md)
    region = "eu-west-1"
    image_id = "ami-0abc"
    instance_type = "c7i.xlarge"

A group's nodes belong to the partitions whose ``nodes`` name them (or that take every
node), as configured nodes that have not joined yet do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hal.config.priority import fail, positive_seconds, unknown_key, whole_number
from hal.core.errors import InvalidRequest
from hal.core.node import check_features
from hal.core.node_groups import MARKETS, ON_DEMAND, PROVIDERS, SPOT_PROVIDERS, NodeGroup
from hal.core.patience import Patience, parse_patience
from hal.core.resources import ResourceVector

CLOUD_KEYS = (
    "interval_seconds",
    "pending_seconds",
    "price_interval_seconds",
    "server_url",
    "ca_file",
    "burst_after",
    "burst_after_by_qos",
    "burst_after_by_partition",
    "groups",
)
GROUP_KEYS = (
    "name",
    "provider",
    "nodes",
    "cpus",
    "memory",
    "gpus",
    "gpu_type",
    "features",
    "price_per_hour",
    "market",
    "max_price",
    "idle_seconds",
    "boot_timeout_seconds",
    "boot_seconds",
    "interruption_rate",
    "data_cache",
    "egress_per_gb",
    *PROVIDERS,
)


@dataclass(frozen=True, slots=True)
class CloudConfig:
    groups: tuple[NodeGroup, ...] = ()
    interval_seconds: float = 10.0
    pending_seconds: float = 10.0
    server_url: str = ""  # "": the server's own URL
    ca_file: str = ""  # "": the server's HAL_CA_FILE, if any (``ca_pem``)
    price_interval_seconds: float = 300.0  # published prices are read this often
    # a job's patience before new nodes are made for it, when it gives no --burst-after
    # (hal.cloud.burst): its QoS's, else its partition's, else burst_after
    burst_after: Patience = field(default_factory=Patience)
    burst_after_by_qos: Mapping[str, Patience] = field(default_factory=dict)
    burst_after_by_partition: Mapping[str, Patience] = field(default_factory=dict)


WEB = ("http://", "https://")
PEM_CERT = "-----BEGIN CERTIFICATE-----"


def _ca_file(path: Any, source: str) -> str:
    """``ca_file``: a readable PEM certificate, checked now rather than at a launch."""
    if not isinstance(path, str):
        raise fail(source, "cloud.ca_file", f"must be a file's path (got {path!r})")
    if path:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as err:
            raise fail(source, "cloud.ca_file", f"cannot read {path}: {err.strerror}") from None
        if PEM_CERT not in text:
            raise fail(
                source,
                "cloud.ca_file",
                f"{path} holds no PEM certificate; name the site CA's certificate "
                "(`hal certs init` wrote ca.pem)",
            )
    return path


def cloud_from_table(table: Any, source: str) -> CloudConfig:
    if not isinstance(table, dict):
        raise fail(source, "cloud", "[cloud] must be a table")
    for key in table:
        if key not in CLOUD_KEYS:
            raise fail(source, f"cloud.{key}", unknown_key(key, CLOUD_KEYS))
    kwargs: dict[str, Any] = {}
    for key in ("interval_seconds", "pending_seconds"):
        if key in table:
            kwargs[key] = _seconds(table[key], source, f"cloud.{key}")
    if "price_interval_seconds" in table:
        kwargs["price_interval_seconds"] = positive_seconds(
            table["price_interval_seconds"], source, "cloud.price_interval_seconds"
        )
    url = table.get("server_url", "")
    urls = [u.strip().rstrip("/") for u in url.split(",")] if isinstance(url, str) else [""]
    if not isinstance(url, str) or (url and not all(u.startswith(WEB) for u in urls)):
        raise fail(
            source,
            "cloud.server_url",
            f'must be a URL like "http://head:8080", or several separated by commas (got {url!r})',
        )
    kwargs["server_url"] = ",".join(urls) if url else ""
    kwargs["ca_file"] = _ca_file(table.get("ca_file", ""), source)
    if "burst_after" in table:
        kwargs["burst_after"] = _duration(table["burst_after"], source, "cloud.burst_after")
    for key in ("burst_after_by_qos", "burst_after_by_partition"):
        if key in table:
            kwargs[key] = _durations(table[key], source, f"cloud.{key}")
    items = table.get("groups", [])
    if not isinstance(items, list):
        raise fail(source, "cloud.groups", "write each group as a [[cloud.groups]] table")
    groups = tuple(_group(item, i, source) for i, item in enumerate(items))
    _check_unique(groups, source)
    return CloudConfig(groups=groups, **kwargs)


def _duration(value: Any, source: str, where: str) -> Patience:
    """A patience: seconds, or as ``--burst-after`` takes it (``"10m"``, ``"0.5x"``,
    ``"never"``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise fail(
            source, where, f'must be seconds or like "10m", "0.5x" or "never" (got {value!r})'
        )
    try:
        return parse_patience(value, field=where)
    except InvalidRequest as err:
        raise fail(source, where, err.message) from None


def _durations(value: Any, source: str, where: str) -> dict[str, Patience]:
    if not isinstance(value, dict):
        raise fail(source, where, 'must be a table like { normal = "10m", scavenger = "never" }')
    return {str(k): _duration(v, source, f"{where}.{k}") for k, v in value.items()}


def _seconds(value: Any, source: str, field: str) -> float:
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return positive_seconds(value, source, field)


def _group(item: Any, i: int, source: str) -> NodeGroup:
    from hal.config.model import _node_names
    from hal.slurm.syntax import parse_memory

    where = f"cloud.groups[{i}]"
    if not isinstance(item, dict):
        raise fail(source, where, "write each group as a [[cloud.groups]] table")
    for key in item:
        if key not in GROUP_KEYS:
            raise fail(source, f"{where}.{key}", unknown_key(key, GROUP_KEYS))
    for key in ("name", "provider", "nodes", "cpus", "memory"):
        if key not in item:
            raise fail(source, f"{where}.{key}", "is required (docs/admin/cloud.md has an example)")
    name = item["name"]
    if not isinstance(name, str) or not name.isidentifier():
        raise fail(source, f"{where}.name", f'must be a name like "burst" (got {name!r})')
    provider = item["provider"]
    if provider not in PROVIDERS:
        raise fail(
            source, f"{where}.provider", f"must be one of {', '.join(PROVIDERS)} (got {provider!r})"
        )
    memory = item["memory"]
    try:
        memory_bytes = parse_memory(str(memory), field="memory")
    except InvalidRequest as err:
        raise fail(source, f"{where}.memory", err.message) from None
    if memory_bytes <= 0:
        raise fail(source, f"{where}.memory", "must be more than 0")
    features = item.get("features", [])
    if isinstance(features, str):
        features = [f for f in features.split(",") if f]
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise fail(source, f"{where}.features", 'must be a list like ["cloud", "c7i"]')
    try:
        check_features(features)
    except InvalidRequest as err:
        raise fail(source, f"{where}.features", err.message) from None
    gpu_type = item.get("gpu_type", "")
    if not isinstance(gpu_type, str):
        raise fail(
            source, f"{where}.gpu_type", f'must be a name like "nvidia_a100" (got {gpu_type!r})'
        )
    price = item.get("price_per_hour", 0.0)
    if isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < 1e6:
        raise fail(
            source,
            f"{where}.price_per_hour",
            f"must be a number >= 0, in USD an hour, e.g. 0.17 (got {price!r})",
        )
    market, max_price = _market(item, provider, source, where)
    settings = _settings(item.get(provider, {}), source, f"{where}.{provider}")
    other = [p for p in PROVIDERS if p != provider and p in item]
    if other:
        raise fail(source, f"{where}.{other[0]}", f"the group's provider is {provider!r}")
    return NodeGroup(
        name=name,
        provider=provider,
        nodes=_node_names(item["nodes"], source, f"{where}.nodes"),
        resources=ResourceVector(
            cpus=whole_number(item["cpus"], source, f"{where}.cpus", 1),
            memory_bytes=memory_bytes,
            gpus=whole_number(item.get("gpus", 0), source, f"{where}.gpus"),
        ),
        features=tuple(features),
        gpu_model=gpu_type,
        price_per_hour=float(price),
        market=market,
        max_price=max_price,
        idle_seconds=_seconds(item.get("idle_seconds", 300), source, f"{where}.idle_seconds"),
        boot_timeout_seconds=positive_seconds(
            item.get("boot_timeout_seconds", 300), source, f"{where}.boot_timeout_seconds"
        ),
        boot_seconds=_seconds(item.get("boot_seconds", 120), source, f"{where}.boot_seconds"),
        interruption_rate=_rate(item, "interruption_rate", source, where),
        data_cache=_text(item, "data_cache", source, where),
        egress_per_gb=_rate(item, "egress_per_gb", source, where),
        settings=settings,
    )


def _market(item: dict[str, Any], provider: str, source: str, where: str) -> tuple[str, float]:
    """The group's ``market`` and ``max_price``: spot only where the provider lends it."""
    market = item.get("market", ON_DEMAND)
    if market not in MARKETS:
        raise fail(
            source, f"{where}.market", f"must be one of {', '.join(MARKETS)} (got {market!r})"
        )
    if market != ON_DEMAND and provider not in SPOT_PROVIDERS:
        raise fail(
            source,
            f"{where}.market",
            f"provider {provider!r} lends no {market} capacity (spot: {', '.join(SPOT_PROVIDERS)});"
            f' write market = "{ON_DEMAND}" or leave it out',
        )
    price = item.get("max_price", 0.0)
    if isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < 1e6:
        raise fail(
            source, f"{where}.max_price", f"must be a number >= 0, e.g. 0.12 (got {price!r})"
        )
    if price and market == ON_DEMAND:
        raise fail(source, f"{where}.max_price", 'applies to spot groups only: add market = "spot"')
    return market, float(price)


def _settings(settings: Any, source: str, where: str) -> dict[str, str]:
    """The provider's own settings, each as a string (a list of strings: comma-joined)."""
    if not isinstance(settings, dict):
        raise fail(source, where, "must be a table of settings (strings, numbers or lists)")
    out: dict[str, str] = {}
    for key, value in settings.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[str(key)] = ",".join(value)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out[str(key)] = str(value)
        else:
            raise fail(
                source,
                f"{where}.{key}",
                f"must be a string, a number or a list of strings (got {value!r})",
            )
    return out


def _rate(item: Any, key: str, source: str, where: str) -> float:
    value = item.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
        raise fail(source, f"{where}.{key}", f"must be a number >= 0 (got {value!r})")
    return float(value)


def _text(item: Any, key: str, source: str, where: str) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise fail(source, f"{where}.{key}", f'must be a name like "leaf-1" (got {value!r})')
    return value


def _check_unique(groups: tuple[NodeGroup, ...], source: str) -> None:
    names: dict[str, str] = {}
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.name in seen:
            raise fail(source, f"cloud.groups[{i}].name", f"group {group.name!r} is named twice")
        seen.add(group.name)
        for node in group.nodes:
            if node in names:
                raise fail(
                    source,
                    f"cloud.groups[{i}].nodes",
                    f"node {node} is also in group {names[node]!r}: give each group its own names",
                )
            names[node] = group.name
