"""``hal.toml``: cluster name, partitions, timeouts, limits and the scheduler profile.

Example::

    cluster_name = "hal"
    min_job_age_seconds = 300      # finished jobs stay in `squeue -t all` this long
    kill_wait_seconds = 30         # SIGTERM → SIGKILL grace at time limit and cancel
    node_timeout_seconds = 30      # no heartbeat for this long → node DOWN, jobs NODE_FAIL
    heartbeat_interval_seconds = 5 # how often agents report
    max_array_size = 1001          # Slurm's MaxArraySize (0: no job arrays)
    return_to_service = 1          # Slurm's ReturnToService: 0, 1 or 2 (below)
    max_batch_jobs = 100000        # jobs in one POST /v1/jobs/batch
    max_request_bytes = 67108864   # the largest request body the server reads
    max_artifact_bytes = 2147483648 # the largest artifact one may publish (docs/user/artifacts.md)

    [[partitions]]                 # none: one partition "debug" with every node
    name = "debug"
    default = true                 # where jobs without -p go (default: the first)
    max_time = "1-00:00:00"        # Slurm's MaxTime: minutes, "D-HH:MM:SS" or "UNLIMITED"
    default_time = 60              # Slurm's DefaultTime (0: max_time)
    nodes = []                     # a host list ("n[1-8],gpu1") or a list of them; []: every node
    max_nodes = 0                  # Slurm's MaxNodes per job (0: no limit)
    priority_tier = 1              # Slurm's PriorityTier (docs/admin/preemption.md)
    priority_job_factor = 1        # Slurm's PriorityJobFactor (docs/admin/priority.md)
    up = true                      # false: Slurm's State=DOWN, jobs queue but do not start

    [scheduler]
    interval_seconds = 1.0
    predictor = "learned"          # run times for backfill planning and expected starts:
                                   # "user" (requested time, as Slurm), "avg2" or "learned"
    correction = "default"         # what a running job's outlived prediction becomes:
                                   # "default" (the predictor's own rule: learned's
                                   # re-prediction, Tsafrir's steps for the others),
                                   # "steps", "request" (its time limit) or "model"; the
                                   # policy `hal sim run --correction` replays
    drain_anomalous_nodes = false  # drain nodes whose jobs fail, or run slow, far more
                                   # than their peers'
    enable_user_top = false        # let users `scontrol top` their own jobs (Slurm's
                                   # SchedulerParameters=enable_user_top); else admins only
    max_job_starts = 1000          # jobs of one partition a pass starts at most, the
                                   # rest in the next (Slurm's sched_max_job_start, per
                                   # partition; 0: no limit); a pass passes over the
                                   # partition's others once it has placed as many
    default_queue_depth = 100      # jobs a pass between full ones looks at, in queue
                                   # order (Slurm's default_queue_depth; 0: every pass full)
    sched_interval = 60            # seconds between passes over every pending job
                                   # (Slurm's sched_interval; backfill's also are full)

    [accounting]                   # optional: slurmdbd's PurgeEventAfter / PurgeJobAfter
    purge_events_after = "90days"  # the event log; hours, days or months (docs/admin/accounting.md)
    purge_jobs_after = "12months"  # finished jobs (sacct); none: kept forever

    [mail]                         # optional: job mail (docs/user/mail.md), Slurm's MailProg
    prog = "/bin/mail"             # run as `prog -s SUBJECT RECIPIENT`; missing: no mail
    domain = ""                    # MailDomain: user@domain when --mail-user is not given

    [cloud]                        # optional: nodes made on demand (docs/admin/cloud.md)

    [power]                        # optional: idle owned nodes powered down (docs/admin/power.md)
    suspend_program = "/usr/local/sbin/node-off"   # Slurm's SuspendProgram, ResumeProgram
    resume_program = "/usr/local/sbin/node-on"
    suspend_time = 600             # idle seconds before a node is powered down (-1: never)

    [harmonic]                     # optional: the traffic graph (docs/harmonic.md)
    half_life = "1h"               # what was measured counts half as much this much later

    [artifacts]                    # optional: artifacts on the nodes (docs/user/artifacts.md)
    node_cache = "50G"             # each node's copies within this (over --artifact-cache)
    canary_min_jobs = 5            # jobs on each side before an alias's canary is judged

    [licenses]                     # optional: Slurm's Licenses= (docs/user/licenses.md)
    matlab = 10                    # jobs hold them with sbatch -L matlab:2

    [topology]                     # optional: the switch tree (see config/topology.py)
    file = "topology.conf"         # Slurm syntax, or [[topology.switches]] tables
    # [[topology.labels]] nodes = "n[1-8]", rack = "r1", zone = "z1": rack/zone/region/
    # site labels; without switches or blocks they form the placement tree

    [data]                         # optional: data-aware scheduling over the HAL cache
    cache_url = "http://cache-cp:8480"   # the cache control plane (docs/admin/cache.md)
    refresh_seconds = 2.0          # how often the server re-reads topology and holders
    prestage = true                # pull a placed job's --data inputs into its nodes' leaves
    # weight = 2.0                 # the datalocality score weight (default profile only)
    peer_sourcing = false          # must match the control plane's --peer-sourcing
    [data.node_cache]              # HAL node → the leaf cache instance it reads through
    node001 = "leaf-rack1-001"     # (default: the instance whose id is the node's name)
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hal.config.accounting import AccountingConfig, accounting_from_table
from hal.config.artifacts import ArtifactsConfig, artifacts_from_table
from hal.config.cloud import CloudConfig, cloud_from_table
from hal.config.harmonic import HarmonicConfig, harmonic_from_table
from hal.config.mail import MailConfig, mail_from_table
from hal.config.power import PowerConfig, power_from_table
from hal.config.preemption import preemption_from_table
from hal.config.priority import (
    LONGEST_S,
    PRIORITY_KEYS,
    fail,
    positive_seconds,
    priority_from_dict,
    whole_number,
)
from hal.core.errors import InvalidRequest, did_you_mean
from hal.core.node import Partition
from hal.core.preemption import PreemptionPolicy
from hal.core.priority import PriorityPolicy
from hal.core.states import PartitionState
from hal.core.topology import Topology
from hal.slurm.syntax import is_plain_name


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    name: str
    default: bool = False
    nodes: tuple[str, ...] = ()
    max_time_s: int = 0
    default_time_s: int = 0
    max_nodes: int = 0
    priority_tier: int = 1
    up: bool = True
    priority_job_factor: int = 1  # PriorityJobFactor (multifactor's partition factor)

    def to_partition(self) -> Partition:
        return Partition(
            name=self.name,
            nodes=self.nodes,
            default=self.default,
            max_time_s=self.max_time_s,
            default_time_s=self.default_time_s,
            max_nodes=self.max_nodes,
            priority_tier=self.priority_tier,
            state=PartitionState.UP if self.up else PartitionState.DOWN,
            priority_job_factor=self.priority_job_factor,
        )


@dataclass(frozen=True, slots=True)
class DataConfig:
    """``[data]``: where the HAL cache's control plane is and how the server uses it
    (``hal.server.data.DataService``). ``weight`` None: the datalocality plugin's default
    (``hal.scheduler.plugins.DATA_WEIGHT``; the config plane does not import plugins)."""

    cache_url: str
    node_cache: Mapping[str, str] = field(default_factory=dict)
    refresh_seconds: float = 2.0
    prestage: bool = True
    weight: float | None = None
    peer_sourcing: bool = False
    # how long a data job may wait for a node by its data (None: the plugin's default)
    locality_wait_seconds: float | None = None
    # [data.datasets]: name → cache keys, so that jobs can say --data @name
    datasets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HalConfig:
    cluster_name: str = "hal"
    min_job_age_seconds: int = 300
    kill_wait_seconds: int = 30
    node_timeout_seconds: float = 30.0
    heartbeat_interval_seconds: float = 5.0
    max_array_size: int = 1001
    # Slurm's ReturnToService: whether a DOWN node whose agent registers goes back to
    # service (``hal.state.return_to_service``). 0: never, it waits for `scontrol update
    # State=RESUME`; 1: if the server set it DOWN because its agent went silent; 2:
    # always. A DRAINED node stays drained. Slurm's default is 0; HAL's is 1, what it
    # always did: `hal up` restarts a dead agent itself and expects its node back, and
    # the many sites that set ReturnToService=1 get it without a line.
    return_to_service: int = 1
    max_batch_jobs: int = 100_000
    max_request_bytes: int = 64 * 1024 * 1024
    max_artifact_bytes: int = 2 * 1024**3
    scheduler_interval_seconds: float = 1.0
    scheduler_profile: dict[str, Any] = field(default_factory=dict)
    # The run-time predictor the backfill plugin plans with (unless its plugin_args name
    # one) and the server trains from its accounting: "learned" (until its first model,
    # after 200 finished jobs, it answers like "avg2"), "avg2" or "user" (Slurm's choice:
    # the requested time). Predictions never kill or shorten a job; see docs/prediction.md.
    scheduler_predictor: str = "learned"
    # What a running job's prediction becomes once the job outlives it (the expiry
    # correction; hal.predict.planning_predictor, the same for `hal sim run --correction`):
    # "default" (the predictor's own rule: learned re-predicts from the time run, avg2 and
    # user Tsafrir's steps), "steps", "request" (the time limit) or "model".
    scheduler_correction: str = "default"
    # Drain a node whose jobs fail far more often, or run far longer than predicted, than
    # its peers' (the anomaly detector's NodeFailureRateAnomalous and NodeRuntimeInflated,
    # docs/admin/observability.md); off: only the alert and an event.
    drain_anomalous_nodes: bool = False
    # Users may move their own pending jobs to the top (``scontrol top``, Slurm's
    # SchedulerParameters=enable_user_top); off: only administrators.
    enable_user_top: bool = False
    # The most jobs of one partition one scheduling pass starts (Slurm's
    # SchedulerParameters=sched_max_job_start, per partition so that one partition's
    # backlog keeps no other's jobs waiting; 0: no limit): the others start in the next pass,
    # moments later. Writing a start and its launch takes the server's one event loop a
    # few tenths of a millisecond, so a burst of 5,000 would hold agents' syncs and
    # squeue for seconds (docs/admin/scale.md).
    scheduler_max_job_starts: int = 1000
    # Where a pass is decided (ADR 0031): "thread", on a worker thread of the server's
    # process, sharing the interpreter with its event loop; "fork", in a process forked
    # at the pass (a core of its own, for a controller with cores to spare: on two
    # cores shared with agents and the database it cost more than it gave); "auto",
    # forked from 5,000 jobs (pending and running) and on the thread below.
    scheduler_pass_process: str = "thread"
    # The main pass's bounds (Slurm's SchedulerParameters=default_queue_depth and
    # sched_interval, ADR 0029): a pass looks at every pending job every
    # ``scheduler_sched_interval_s`` seconds (and when backfill runs); the passes in
    # between, woken by submissions and ends, at the first ``default_queue_depth`` in
    # queue order (0: every pass full). At 100,000 pending jobs a full pass is seconds
    # of the scheduler's thread, and the jobs deep in the queue rarely change.
    scheduler_default_queue_depth: int = 100
    scheduler_sched_interval_s: float = 60.0
    partitions: tuple[PartitionConfig, ...] = (PartitionConfig(name="debug", default=True),)
    topology: Topology | None = None  # the switch tree; None: no topology-aware placement
    # [priority], [[accounts]], [[users]], [[qos]] (hal.config.priority)
    priority: PriorityPolicy = field(default_factory=PriorityPolicy)
    # [data]: the cache control plane; None: no data-aware scheduling or pre-staging
    data: DataConfig | None = None
    # [preemption]: who may preempt whom and how (off by default, as in Slurm)
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    # [licenses]: name → how many the cluster has (Slurm's Licenses=); jobs ask with -L
    licenses: Mapping[str, int] = field(default_factory=dict)
    # [accounting]: how long events and finished jobs are kept (default: forever)
    accounting: AccountingConfig = field(default_factory=AccountingConfig)
    # [mail]: the program that sends job mail (Slurm's MailProg, MailDomain)
    mail: MailConfig = field(default_factory=MailConfig)
    # [cloud]: node groups the autoscaler creates nodes in for waiting jobs (docs/admin/cloud.md)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    # [power]: idle owned nodes powered down and up through programs (docs/admin/power.md)
    power: PowerConfig = field(default_factory=PowerConfig)
    # [harmonic]: the traffic graph's half-life and bounds (hal.server.traffic)
    harmonic: HarmonicConfig = field(default_factory=HarmonicConfig)
    # [artifacts]: the nodes' artifact caches, the aliases' canaries (docs/user/artifacts.md)
    artifacts: ArtifactsConfig = field(default_factory=ArtifactsConfig)

    @property
    def datasets(self) -> Mapping[str, tuple[str, ...]]:
        """The named datasets jobs may give as ``--data @name`` (none without [data])."""
        return {} if self.data is None else self.data.datasets

    def partition_objects(self) -> tuple[Partition, ...]:
        return tuple(p.to_partition() for p in self.partitions)

    @property
    def default_partition(self) -> str:
        for p in self.partitions:
            if p.default:
                return p.name
        return self.partitions[0].name


_TOP_KEYS = {
    "cluster_name",
    "min_job_age_seconds",
    "kill_wait_seconds",
    "node_timeout_seconds",
    "heartbeat_interval_seconds",
    "max_array_size",
    "max_batch_jobs",
    "max_request_bytes",
    "max_artifact_bytes",
    "return_to_service",
    "partitions",
    "scheduler",
    "topology",
    "data",
    "preemption",
    "licenses",
    "accounting",
    "mail",
    "cloud",
    "power",
    "harmonic",
    "artifacts",
    *PRIORITY_KEYS,
}
# integer settings and their least value (max_array_size 0: no arrays, as Slurm's
# MaxArraySize=0; no batch of 0 jobs or request of 0 bytes could ever be accepted)
_TOP_WHOLE = {
    "min_job_age_seconds": 0,
    "kill_wait_seconds": 0,
    "max_array_size": 0,
    "max_batch_jobs": 1,
    "max_request_bytes": 1,
    "max_artifact_bytes": 1,
}
# [scheduler] keys that are server settings; the rest of the table is the profile
_SCHEDULER_SETTINGS = {
    "interval_seconds",
    "predictor",
    "correction",
    "drain_anomalous_nodes",
    "enable_user_top",
    "max_job_starts",
    "default_queue_depth",
    "sched_interval",
    "pass_process",
}
PASS_PROCESSES = ("auto", "fork", "thread")
# ... and the profile's own (``hal.scheduler.framework.profile``, which checks them again;
# a test keeps the two lists equal)
PROFILE_KEYS = {"name", "plugins", "score_weights", "plugin_args"}
# hal.predict.CONFIGURABLE and hal.predict.CORRECTIONS (the config plane does not import
# the predictors; a test keeps them equal)
PREDICTORS = ("user", "avg2", "learned")
CORRECTIONS = ("default", "steps", "request", "model")
_PARTITION_KEYS = {
    "name",
    "default",
    "nodes",
    "max_time",
    "default_time",
    "max_nodes",
    "priority_tier",
    "up",
    "priority_job_factor",
}


def load_config(path: str | Path | None) -> HalConfig:
    """Read ``path`` (TOML); ``None`` or a missing default file gives the defaults."""
    if path is None:
        return HalConfig()
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise InvalidRequest(f"cannot read config file {p}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise InvalidRequest(
            f"config file {p} is not UTF-8 text (byte {err.start}); save it as UTF-8"
        ) from err
    except tomllib.TOMLDecodeError as err:
        raise InvalidRequest(f"config file {p} is not valid TOML: {err}") from err
    return config_from_dict(raw, source=str(p), base_dir=p.parent)


def config_from_dict(
    raw: dict[str, Any], source: str = "config", base_dir: Path | None = None
) -> HalConfig:
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise InvalidRequest(
            f"{source}: unknown key(s) {sorted(unknown)}"
            f"{did_you_mean(sorted(unknown)[0], _TOP_KEYS)}; known keys are {sorted(_TOP_KEYS)}",
            field=sorted(unknown)[0],
        )
    kwargs: dict[str, Any] = {}
    if "cluster_name" in raw:
        name = raw["cluster_name"]
        if not isinstance(name, str) or not name.strip():
            raise fail(source, "cluster_name", f'must be a name like "hal" (got {name!r})')
        kwargs["cluster_name"] = name
    for key, least in _TOP_WHOLE.items():
        if key in raw:
            kwargs[key] = whole_number(raw[key], source, key, least)
    if "return_to_service" in raw:
        kwargs["return_to_service"] = _return_to_service(raw["return_to_service"], source)
    for key in ("node_timeout_seconds", "heartbeat_interval_seconds"):
        if key in raw:  # 0 would call every node DOWN at once, or spin the agents
            kwargs[key] = positive_seconds(raw[key], source, key)
    scheduler = raw.get("scheduler", {})
    if not isinstance(scheduler, dict):
        raise InvalidRequest(f"{source}: [scheduler] must be a table", field="scheduler")
    extra = sorted(set(scheduler) - _SCHEDULER_SETTINGS - PROFILE_KEYS)
    if extra:
        known = ", ".join(sorted(_SCHEDULER_SETTINGS | PROFILE_KEYS))
        hint = did_you_mean(extra[0], _SCHEDULER_SETTINGS | PROFILE_KEYS)
        raise fail(source, f"scheduler.{extra[0]}", f"unknown key{hint}; [scheduler] takes {known}")
    if "interval_seconds" in scheduler:
        interval = scheduler["interval_seconds"]
        kwargs["scheduler_interval_seconds"] = positive_seconds(
            interval, source, "scheduler.interval_seconds"
        )
    for key, choices in (
        ("predictor", PREDICTORS),
        ("correction", CORRECTIONS),
        ("pass_process", PASS_PROCESSES),
    ):
        if key in scheduler:
            value = scheduler[key]
            if value not in choices:
                raise InvalidRequest(
                    f"{source}: [scheduler] {key} must be one of {', '.join(choices)}, "
                    f"not {value!r}",
                    field=f"scheduler.{key}",
                )
            kwargs[f"scheduler_{key}"] = value
    if "max_job_starts" in scheduler:
        kwargs["scheduler_max_job_starts"] = whole_number(
            scheduler["max_job_starts"], source, "scheduler.max_job_starts"
        )
    if "default_queue_depth" in scheduler:
        kwargs["scheduler_default_queue_depth"] = whole_number(
            scheduler["default_queue_depth"], source, "scheduler.default_queue_depth"
        )
    if "sched_interval" in scheduler:
        kwargs["scheduler_sched_interval_s"] = positive_seconds(
            scheduler["sched_interval"], source, "scheduler.sched_interval"
        )
    for key in ("drain_anomalous_nodes", "enable_user_top"):
        if key in scheduler:
            value = scheduler[key]
            if not isinstance(value, bool):
                raise InvalidRequest(
                    f"{source}: [scheduler] {key} must be true or false",
                    field=f"scheduler.{key}",
                )
            kwargs[key] = value
    kwargs["scheduler_profile"] = {
        k: v for k, v in scheduler.items() if k not in _SCHEDULER_SETTINGS
    }
    if "partitions" in raw:
        kwargs["partitions"] = _partitions(raw["partitions"], source)
    if "topology" in raw:
        from hal.config.topology import topology_from_table
        from hal.core.topology import TopologyError

        try:
            kwargs["topology"] = topology_from_table(raw["topology"], base_dir=base_dir)
        except TopologyError as err:  # its messages name the field, not the file
            raise TopologyError(f"{source}: {err.message}", field=err.field) from None
    kwargs["priority"] = priority_from_dict(raw, source)
    if "data" in raw:
        kwargs["data"] = data_from_table(raw["data"], source)
    if "preemption" in raw:
        kwargs["preemption"] = preemption_from_table(raw["preemption"], source)
    if "licenses" in raw:
        kwargs["licenses"] = _licenses(raw["licenses"], source)
    if "accounting" in raw:
        kwargs["accounting"] = accounting_from_table(
            raw["accounting"],
            source,
            policy=kwargs["priority"],
            min_job_age_s=kwargs.get("min_job_age_seconds", HalConfig().min_job_age_seconds),
        )
    if "mail" in raw:
        kwargs["mail"] = mail_from_table(raw["mail"], source)
    if "cloud" in raw:
        kwargs["cloud"] = cloud_from_table(raw["cloud"], source)
    if "harmonic" in raw:
        kwargs["harmonic"] = harmonic_from_table(raw["harmonic"], source)
    if "artifacts" in raw:
        kwargs["artifacts"] = artifacts_from_table(raw["artifacts"], source)
    if "power" in raw:
        names = tuple(p.name for p in kwargs.get("partitions", HalConfig().partitions))
        kwargs["power"] = power_from_table(raw["power"], source, names)
    return HalConfig(**kwargs)


def _return_to_service(value: object, source: str) -> int:
    """``return_to_service``: Slurm's ReturnToService, 0, 1 or 2 (3 and up, 22.05's
    later additions, are not taken)."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2):
        raise fail(
            source,
            "return_to_service",
            f"must be 0 (a DOWN node stays down until resumed), 1 (back when the server "
            f"set it DOWN for not responding) or 2 (back whenever its agent registers); "
            f"got {value!r}",
        )
    return value


def _licenses(table: object, source: str) -> dict[str, int]:
    """``[licenses]``: ``matlab = 10``, each name as jobs give it to ``-L``."""
    if not isinstance(table, dict):
        raise fail(source, "licenses", "must be a table of counts, e.g. [licenses] matlab = 10")
    counts: dict[str, int] = {}
    for name, count in table.items():
        if not is_plain_name(name):  # as -L reads a license's name
            raise fail(
                source,
                f"licenses.{name}",
                "a license name is letters, digits, '.', '_' or '-' (e.g. matlab)",
            )
        counts[name] = whole_number(count, source, f"licenses.{name}")
    return counts


_DATA_KEYS = (
    "cache_url",
    "node_cache",
    "refresh_seconds",
    "prestage",
    "weight",
    "peer_sourcing",
    "datasets",
    "locality_wait_seconds",
)
_DATASET_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# the cache's instance ids (hal.cache.wire; the config plane does not import the cache)
_INSTANCE_ID = re.compile(r"[a-zA-Z0-9_-]+")


def data_from_table(table: Any, source: str = "config") -> DataConfig:
    """``[data]`` → ``DataConfig``; errors name the field (``data.cache_url`` ...)."""
    if not isinstance(table, dict):
        raise InvalidRequest(f"{source}: [data] must be a table", field="data")
    unknown = sorted(set(table) - set(_DATA_KEYS))
    if unknown:
        raise InvalidRequest(
            f"{source}: [data] has unknown key(s) {unknown}{did_you_mean(unknown[0], _DATA_KEYS)}; "
            f"known keys are {list(_DATA_KEYS)}",
            field=f"data.{unknown[0]}",
        )
    url = table.get("cache_url")
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise InvalidRequest(
            f"{source}: [data] cache_url must be the cache control plane's http(s) base URL, "
            f'e.g. "http://cache-cp:8480" (got {url!r})',
            field="data.cache_url",
        )
    node_cache = table.get("node_cache", {})
    if not isinstance(node_cache, dict):
        raise InvalidRequest(
            f"{source}: [data] node_cache must be a table of node name = leaf instance id",
            field="data.node_cache",
        )
    for node, leaf in node_cache.items():
        if not isinstance(leaf, str) or not _INSTANCE_ID.fullmatch(leaf):
            raise InvalidRequest(
                f"{source}: [data.node_cache] {node} must name a cache instance id "
                f"([a-zA-Z0-9_-]+), not {leaf!r}",
                field=f"data.node_cache.{node}",
            )
    refresh = table.get("refresh_seconds", 2.0)
    if (
        isinstance(refresh, bool)
        or not isinstance(refresh, int | float)
        or not 0 < refresh <= LONGEST_S
    ):
        raise InvalidRequest(
            f"{source}: [data] refresh_seconds must be a number of seconds > 0 (got {refresh!r})",
            field="data.refresh_seconds",
        )
    weight = table.get("weight")
    if weight is not None and (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not 0 <= weight <= LONGEST_S
    ):
        raise InvalidRequest(
            f"{source}: [data] weight must be a score weight >= 0 (got {weight!r})",
            field="data.weight",
        )
    wait = table.get("locality_wait_seconds")
    if wait is not None and (
        isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= LONGEST_S
    ):
        raise InvalidRequest(
            f"{source}: [data] locality_wait_seconds must be a number of seconds >= 0 "
            f"(0: never wait for a node by the data; got {wait!r})",
            field="data.locality_wait_seconds",
        )
    flags: dict[str, bool] = {}
    for name, default in (("prestage", True), ("peer_sourcing", False)):
        value = table.get(name, default)
        if not isinstance(value, bool):
            raise InvalidRequest(
                f"{source}: [data] {name} must be true or false (got {value!r})",
                field=f"data.{name}",
            )
        flags[name] = value
    return DataConfig(
        datasets=_datasets(table.get("datasets", {}), source),
        cache_url=url.rstrip("/"),
        node_cache=dict(node_cache),
        refresh_seconds=float(refresh),
        prestage=flags["prestage"],
        weight=None if weight is None else float(weight),
        peer_sourcing=flags["peer_sourcing"],
        locality_wait_seconds=None if wait is None else float(wait),
    )


def _datasets(table: Any, source: str) -> dict[str, tuple[str, ...]]:
    """``[data.datasets]``: ``name = ["key", ...]`` (names: letters, digits, ``_.-``)."""
    from hal.core.data import MAX_DATASET_KEYS, parse_data_keys

    if not isinstance(table, dict):
        raise InvalidRequest(
            f'{source}: [data.datasets] must be a table of name = ["key", ...]',
            field="data.datasets",
        )
    out: dict[str, tuple[str, ...]] = {}
    for name, keys in table.items():
        where = f"data.datasets.{name}"
        if not _DATASET_NAME.fullmatch(name):
            raise InvalidRequest(
                f"{source}: dataset name {name!r} may use letters, digits, '_', '.' and '-'",
                field=where,
            )
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise InvalidRequest(
                f"{source}: [data.datasets] {name} must be a non-empty list of cache keys",
                field=where,
            )
        if any(k.startswith("@") for k in keys):
            raise InvalidRequest(
                f"{source}: [data.datasets] {name} lists a dataset name; list cache keys",
                field=where,
            )
        out[name] = parse_data_keys(keys, field_name=where, limit=MAX_DATASET_KEYS)
    return out


def _partitions(items: Any, source: str) -> tuple[PartitionConfig, ...]:
    if not isinstance(items, list) or not items:
        raise InvalidRequest(
            f"{source}: [[partitions]] needs at least one entry", field="partitions"
        )
    out = [_partition(item, i, source) for i, item in enumerate(items)]
    first: dict[str, int] = {}
    for i, part in enumerate(out):
        if part.name in first:
            raise fail(
                source,
                f"partitions[{i}].name",
                f"partition {part.name!r} is defined twice (also partitions[{first[part.name]}]); "
                "give each [[partitions]] its own name",
            )
        first[part.name] = i
    defaults = [i for i, part in enumerate(out) if part.default]
    if len(defaults) > 1:
        raise fail(
            source,
            f"partitions[{defaults[1]}].default",
            f"partitions {out[defaults[0]].name!r} and {out[defaults[1]].name!r} both have "
            "default = true; keep it on one",
        )
    if not defaults:
        out[0] = replace(out[0], default=True)
    return tuple(out)


# what -p/--partition can name: commas separate partitions there
_PARTITION_NAME = re.compile(r"[^\s,]+")


def _partition(item: Any, i: int, source: str) -> PartitionConfig:
    """One ``[[partitions]]`` table; errors name ``partitions[i].key``."""
    where = f"partitions[{i}]"
    if not isinstance(item, dict):
        raise fail(source, where, 'must be a table: [[partitions]] name = "batch"')
    unknown = sorted(set(item) - _PARTITION_KEYS)
    if unknown:
        raise fail(
            source,
            f"{where}.{unknown[0]}",
            f"unknown key{did_you_mean(unknown[0], _PARTITION_KEYS)}; "
            f"known keys are {sorted(_PARTITION_KEYS)}",
        )
    name = item.get("name")
    if not isinstance(name, str) or not _PARTITION_NAME.fullmatch(name) or not name.isprintable():
        raise fail(
            source,
            f"{where}.name",
            f'needs a name without spaces or commas, e.g. "batch" (got {name!r})',
        )
    flags: dict[str, bool] = {}
    for key, default in (("default", False), ("up", True)):
        flags[key] = item.get(key, default)
        if not isinstance(flags[key], bool):
            raise fail(source, f"{where}.{key}", f"must be true or false (got {flags[key]!r})")
    max_time = _time_limit(item, "max_time", source, where)
    default_time = _time_limit(item, "default_time", source, where)
    if max_time and default_time > max_time:
        raise fail(
            source,
            f"{where}.default_time",
            f"is longer than max_time ({default_time} s > {max_time} s); "
            "lower it or raise max_time",
        )
    return PartitionConfig(
        name=name,
        default=flags["default"],
        nodes=_node_names(item.get("nodes", []), source, f"{where}.nodes"),
        max_time_s=max_time,
        default_time_s=default_time,
        max_nodes=whole_number(item.get("max_nodes", 0), source, f"{where}.max_nodes"),
        priority_tier=whole_number(item.get("priority_tier", 1), source, f"{where}.priority_tier"),
        up=flags["up"],
        priority_job_factor=whole_number(
            item.get("priority_job_factor", 1), source, f"{where}.priority_job_factor"
        ),
    )


def _time_limit(item: dict[str, Any], key: str, source: str, where: str) -> int:
    """``max_time``/``default_time`` as Slurm's MaxTime: ``"1-00:00:00"``, minutes (an
    integer) or ``"UNLIMITED"`` (0: no limit)."""
    from hal.slurm.syntax import parse_time_limit

    value = item.get(key, 0)
    hint = 'write minutes (60), "HH:MM:SS", "D-HH:MM:SS" or "UNLIMITED"'
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise fail(source, f"{where}.{key}", f"{value!r} is not a time limit; {hint}")
    try:
        seconds = parse_time_limit(str(value))
    except InvalidRequest as err:
        raise fail(source, f"{where}.{key}", f"{value!r} is not a time limit; {hint}") from err
    if seconds > LONGEST_S:
        raise fail(source, f"{where}.{key}", f"{value!r} is too long; {hint}")
    return seconds


def _node_names(value: Any, source: str, field: str) -> tuple[str, ...]:
    """A partition's ``nodes``: a host list (``"n[1-8],gpu1"``) or a list of them;
    ``[]`` (or leaving it out) is every node, as Slurm's ``Nodes=ALL``."""
    from hal.slurm.syntax import expand_hostlist

    lists = [value] if isinstance(value, str) else value
    hint = 'write a host list like "n[1-8],gpu1" or a list of them; [] for every node'
    if not isinstance(lists, list) or not all(isinstance(v, str) for v in lists):
        raise fail(source, field, f"{value!r} is not a host list; {hint}")
    names: list[str] = []
    for text in lists:
        try:
            expanded = expand_hostlist(text, field=field)
        except InvalidRequest as err:
            raise fail(source, field, f"{text!r} is not a host list; {hint}") from err
        if not expanded or not all(n.isprintable() and " " not in n for n in expanded):
            raise fail(source, field, f"{text!r} names no valid node; {hint}")
        names.extend(expanded)
    return tuple(dict.fromkeys(names))
