"""Pre-staging of jobs' software (docs/user/artifacts.md): a pending job's artifacts, its
container image and its Python environment are fetched (loaded, built) on the nodes its
backfill reservation plans it on, before it starts there, as the data plane pre-stages its inputs
(``hal.server.data``).

``StagingRunner`` wraps the server's ``PassRunner``: after each pass, for every pending
job that names artifacts, an image or a lock and whose reservation starts within
``PRESTAGE_HORIZON_S``, each planned node's agent gets a ``Prefetch`` instruction, once
per (job, node). A placement needs none: its batch node deploys at launch, and its other
nodes are sent a ``Prefetch`` with the launch (``hal.state.agents.send_launch``). A node
planned and then not used keeps the copies within its cache's bound, as any other.
The agents fetch what a ``Prefetch`` names as they fetch for a launch: through their leaf
cache where the cluster has a cache tree (``hal.server.artifact_tree``), so pre-staging
many nodes reads the content from the database once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence

from hal.core.job import Job
from hal.core.states import JobState
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan
from hal.scheduler.service import PassRunner
from hal.server.data_view import StageTarget, stage_targets
from hal.state.cluster import Cluster
from hal.state.launch import artifact_pins, container_pin, python_env_pin
from hal.wire.agent import Prefetch


class SoftwareStaging:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._wanted: dict[int, None] = {}  # pending jobs naming artifacts or a lock
        self._sent: dict[int, set[str]] = {}  # job → the nodes told to fetch for it
        self._loop: asyncio.AbstractEventLoop | None = None
        self.prefetches = 0  # instructions sent (tests, metrics)
        cluster.on_jobs_changed(self._on_jobs)

    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        """The cluster's job listener (event loop)."""
        if self._loop is None:
            with contextlib.suppress(RuntimeError):
                self._loop = asyncio.get_running_loop()
        for job in jobs:
            spec = job.spec
            if job.state is JobState.PENDING and (
                spec.artifacts or spec.python_env or spec.container
            ):
                self._wanted[job.id] = None
            else:
                self._wanted.pop(job.id, None)
                self._sent.pop(job.id, None)

    def after_pass(self, result: PassResult, now: float) -> None:
        """On the scheduler's worker thread: hand the pass's reservations of jobs with
        software to the event loop."""
        loop = self._loop
        if loop is None or not result.reservations or not self._wanted:
            return
        targets = [
            t
            for t in stage_targets(result, now, with_inputs=self._wanted)
            if t.start is not None  # (a placement's nodes are told at its launch)
        ]
        if targets:
            with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
                loop.call_soon_threadsafe(self.send, targets)

    def send(self, targets: Iterable[StageTarget]) -> None:
        """Tell each target node's agent to fetch its job's software now (event loop)."""
        for t in targets:
            job = self.cluster.jobs.get(t.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            sent = self._sent.setdefault(t.job_id, set())
            session = self.cluster.agent_sessions.get(t.node)
            if t.node in sent or session is None:
                continue
            sent.add(t.node)
            spec = job.spec
            session.push(
                Prefetch(
                    job_id=job.id,
                    artifacts=artifact_pins(spec),
                    python_env=python_env_pin(spec),
                    container=container_pin(spec.container),
                )
            )
            self.prefetches += 1


class StagingRunner:
    """A ``PassRunner`` whose passes' reservations go to ``SoftwareStaging``."""

    def __init__(self, inner: PassRunner, staging: SoftwareStaging) -> None:
        self.inner = inner
        self.staging = staging

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult:
        result = self.inner.run_pass(snapshot)
        self.staging.after_pass(result, snapshot.now)
        return result

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        return self.inner.forecast(plan)
