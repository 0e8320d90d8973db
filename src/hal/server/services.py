"""``Services``: the control plane's services as the HTTP edge (``hal.api``) reaches them,
each typed, made and replaced by ``hal.server.control_plane.ControlPlane`` (at start and at
``scontrol reconfigure``). What more than one route does with them lives here too: an
accepted submission's last resolution (``pin``, ``prime``) and the
``--test-only`` estimates (``will_run``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hal.config.model import HalConfig
from hal.core.container import check_pinned
from hal.core.errors import InvalidRequest
from hal.core.job import HetSpec, Job, JobSpec
from hal.core.pyenv import pin_conda
from hal.htc.process import BrokerProcess
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.framework.status import Status
from hal.scheduler.service import SchedulerService
from hal.server.auth import TokenCache
from hal.server.cloud import CloudService
from hal.server.data import DataService, with_view
from hal.server.dissonance import DissonanceService, with_dissonance
from hal.server.feedback import FeedbackService
from hal.server.observe.plane import ObservePlane
from hal.server.power import PowerService
from hal.server.predictions import PredictionService
from hal.server.priority import PriorityService
from hal.server.standby import Leadership
from hal.server.traffic import TrafficService, with_traffic
from hal.state.artifacts import Registry
from hal.state.cluster import Cluster
from hal.state.steps import StepTable
from hal.wire.jobs import WillRun
from hal.wire.nodes import Reconfigured

log = logging.getLogger("hal.server")


@dataclass(slots=True)
class Services:
    config: HalConfig
    cluster: Cluster
    tokens: TokenCache
    service: SchedulerService
    scheduler: Scheduler  # the pass's, for the estimates (``will_run``)
    predictions: PredictionService | None = None
    priority: PriorityService | None = None  # /v1/priority, /v1/shares, explain
    data: DataService | None = None  # [data]: the data plane (hal.server.data)
    cloud: CloudService | None = None  # [cloud]: the autoscaler, once started
    power: PowerService | None = None  # [power]: owned nodes powered down and up
    traffic: TrafficService | None = None  # the traffic graph (hal.server.traffic)
    # the interference model (hal.server.dissonance)
    dissonance: DissonanceService | None = None
    feedback: FeedbackService | None = None  # application feedback (hal.server.feedback)
    observe: ObservePlane | None = None  # metrics, alerts, the output relay
    # what is kept beside the database (``scontrol show config``'s StateSaveLocation)
    data_dir: Path | None = None
    # ``scontrol reconfigure`` (``ControlPlane.reconfigure``; None: no control plane)
    reconfigure: Callable[[str], Awaitable[Reconfigured]] | None = None
    # whether this server leads, stands by or is starting (``hal.server.standby``)
    leadership: Leadership | None = None
    # the HTC broker process, started at the first HTC request (``hal.api.routes_htc``)
    htc_broker: BrokerProcess | None = None
    steps: StepTable = field(init=False)  # job steps (ADR 0012), made from ``cluster``
    artifacts: Registry = field(init=False)  # published artifacts (docs/user/artifacts.md)
    # administrators whose token an agent used, each warned about once (``agent_dep``)
    admins_as_agents: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.steps = StepTable(self.cluster)
        self.artifacts = Registry(self.cluster)

    def snapshot(self, *, made: bool = False) -> ClusterSnapshot:
        """The cluster's snapshot with the views a pass gets (data, traffic,
        interference), for the what-if calls (``--test-only``, explain)."""
        snap = with_view(self.cluster.snapshot(made=made), self.data)
        return with_dissonance(with_traffic(snap, self.traffic), self.dissonance)

    def pin(self, spec: JobSpec, where: str = "") -> JobSpec:
        """``spec`` with its artifacts pinned: ``NAME@VERSION`` (or the newest) → its
        content's digest, so a later push changes no submitted job."""
        if spec.artifacts:
            spec = spec.with_changes(artifacts=self.artifacts.pin(spec.artifacts, where))
        if spec.container is not None and spec.container.image is not None:
            (image,) = self.artifacts.pin([spec.container.image], where)
            container = check_pinned(replace(spec.container, image=image))
            spec = spec.with_changes(container=container)
        env = spec.python_env
        if env is not None and env.artifact is not None:  # a conda-pack archive
            (pinned,) = self.artifacts.pin([env.artifact], where)
            spec = spec.with_changes(python_env=pin_conda(env, pinned))
        return spec

    async def prime(self, specs: Iterable[JobSpec]) -> None:
        """With ``[data]``: locate the jobs' inputs, so the first pass sees where they are."""
        keys = [k for s in specs for k in s.data]
        if keys and self.data is not None:
            await self.data.prime(keys)

    async def will_run(self, spec: JobSpec) -> WillRun:
        cluster = self.cluster
        partition, limit, priority = cluster.admission.admit(spec, None)
        now = cluster.clock.now()
        probe = Job(
            id=0,
            spec=spec,
            partition=partition,
            time_limit_s=limit,
            priority=priority,
            submit_time=now,
        )
        result = self.scheduler.will_run(self.snapshot(made=True), probe)
        if isinstance(result, Status):
            raise InvalidRequest(
                f"Requested node configuration is not available: {result.message or result.reason}",
                field="resources",
            )
        return WillRun(
            job_id=None,
            expected_start=result.start_time,
            nodes=list(result.allocation.nodes),
            partition=result.partition or partition,
        )

    async def will_run_het(self, specs: list[JobSpec]) -> list[WillRun]:
        """``sbatch --test-only`` of a het job: one start for every component."""
        cluster = self.cluster
        now = cluster.clock.now()
        probes = []
        for i, spec in enumerate(specs):
            partition, limit, priority = cluster.admission.admit(spec, i)
            probes.append(
                Job(
                    id=-1 - i,  # probes: ids no stored job has
                    spec=spec.with_changes(het=HetSpec(-1, i, len(specs))),
                    partition=partition,
                    time_limit_s=limit,
                    priority=priority,
                    submit_time=now,
                )
            )
        result = self.scheduler.will_run_group(self.snapshot(made=True), probes)
        if isinstance(result, Status):
            raise InvalidRequest(
                f"Requested node configuration is not available: {result.message or result.reason}",
                field="resources",
            )
        return [
            WillRun(
                job_id=None,
                expected_start=r.start_time,
                nodes=list(r.allocation.nodes),
                partition=p.partition,
            )
            for r, p in zip(result, probes, strict=True)
        ]
