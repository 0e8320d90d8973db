"""A fake HAL client and builders for the Slurm command tests (the ``client_factory`` seam)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hal.api.job_list import JOB_DEFAULTS
from hal.client.records import MAPS, job_defaults, records
from hal.compat.commands import run
from hal.compat.sbatch import job_of
from hal.core.errors import NotFound
from hal.core.states import JobState
from hal.slurm.steps import LocalStep, StepRequest
from hal.wire.feedback import JobFeedback
from hal.wire.jobs import JobInfo, JobList, JobRun, JobSubmit, JobUpdate, SubmitResult, WillRun
from hal.wire.nodes import (
    ClusterConfig,
    NodeInfo,
    PartitionChange,
    PartitionInfo,
    TopologyInfo,
    UserInfo,
)
from hal.wire.steps import StepInfo

GiB = 1 << 30
MiB = 1 << 20
T0 = datetime(2026, 11, 21, 21, 30, 20).timestamp()  # tests run with TZ=UTC


def answered(value: Any, *, validate: bool, schema: str = "") -> Any:
    """``value`` (a wire model, or a list of them) as ``HalClient`` returns the server's
    JSON of it: the model itself, or with ``validate=False`` records of that JSON, as
    ``read`` makes them of ``schema``'s."""
    if validate:
        return value
    if isinstance(value, list):
        body = "[" + ",".join(item.model_dump_json() for item in value) + "]"
    else:
        body = value.model_dump_json()
    return records(body, maps=MAPS.get(schema, ()))


def job(id: int = 3, **changes: Any) -> JobInfo:
    base: dict[str, Any] = {
        "id": id,
        "display_id": str(id),
        "name": "sleeper",
        "user": "root",
        "partition": "debug",
        "state": "PENDING",
        "state_code": "PD",
        "reason": "Resources",
        "priority": 100,
        "submit_time": T0,
        "time_limit_seconds": 0,
        "node_count": 1,
        "cpus": 1,
        "memory_bytes": 50 * MiB,
        "gpus": 0,
        "ntasks": 1,
        "cpus_per_task": 1,
        "workdir": "/home/root",
        "stdout": f"/home/root/slurm-{id}.out",
        "stderr": f"/home/root/slurm-{id}.out",
    }
    base.update(changes)
    base.setdefault("eligible_time", base["submit_time"])  # a plain job's, as the server's
    if "state" in changes and "state_code" not in changes:
        base["state_code"] = JobState(base["state"]).code
    if base.get("array_job_id") is not None and "display_id" not in changes:
        base["display_id"] = f"{base['array_job_id']}_{base['array_task_id']}"
    return JobInfo(**base)


def running(id: int, **changes: Any) -> JobInfo:
    values: dict[str, Any] = {
        "state": "RUNNING",
        "reason": "None",
        "start_time": T0 + 10,
        "nodes": ["vm"],
    }
    values.update(changes)
    return job(id, **values)


def job_shapes() -> list[JobInfo]:
    """A queue of jobs in every shape a squeue column reads differently."""
    return [
        job(3, account="physics", qos="high", comment="note", licenses="matlab:1"),
        *[
            job(7 + i, array_job_id=4, array_task_id=i, array_max_running=2, name="arr")
            for i in (1, 2, 3)
        ],
        job(6, reason="Dependency", dependency_state="afterok:5(unfulfilled)"),
        job(12, expected_start=T0 + 600, time_limit_seconds=7200, reservation="maint"),
        running(2, name="runner", time_limit_seconds=3600, user="alice", partition="gpu"),
        running(
            13,
            nodes=["vm1", "vm2"],
            node_count=2,
            gpus=4,
            memory_whole_node=True,
            exclusive=True,
            script_path="/home/root/job.sh",
            script_args=["a", "b"],
            het_job_id=13,
            het_job_offset=0,
            het_job_id_set="13-14",
            constraint=["ib"],
        ),
        running(15, state="SUSPENDED", suspended_seconds=30.0, wckey="w", restarts=1),
        job(1, state="FAILED", reason="NonZeroExitCode", start_time=T0, end_time=T0 + 5),
        job(11, state="CANCELLED", reason="None", end_time=T0 + 5),
        job(16, partition="debug,gpu", req_nodes=["vm1"], exc_nodes=["vm2"], nice=5),
    ]


def requeued_run(node: str = "vm") -> JobRun:
    """A job's first run, ended by a requeue 50 s before ``T0`` (sacct -D's earlier run)."""
    return JobRun(
        attempt=0,
        state="REQUEUED",
        exit_code=0,
        partition="debug",
        submit_time=T0 - 60,
        eligible_time=T0 - 60,
        start_time=T0 - 50,
        end_time=T0 - 40,
        nodes=[node],
    )


def node(name: str = "vm", **changes: Any) -> NodeInfo:
    base: dict[str, Any] = {
        "name": name,
        "state": "UP",
        "display_state": "idle",
        "cpus": 2,
        "cpus_alloc": 0,
        "memory_bytes": 1000 * MiB,
        "memory_alloc_bytes": 0,
        "gpus": 0,
        "gpus_alloc": 0,
        "partitions": ["debug"],
    }
    base.update(changes)
    return NodeInfo(**base)


def partition(name: str = "debug", **changes: Any) -> PartitionInfo:
    base: dict[str, Any] = {
        "name": name,
        "default": False,
        "up": True,
        "max_time_seconds": 0,
        "default_time_seconds": 0,
        "max_nodes": 0,
        "nodes": [],
    }
    base.update(changes)
    return PartitionInfo(**base)


@dataclass
class FakeClient:
    """Implements the HalClient methods the commands call, over in-memory lists."""

    job_list: list[JobInfo] = field(default_factory=list)
    feedback: dict[int, JobFeedback] = field(default_factory=dict)  # feedback_latest's
    node_list: list[NodeInfo] = field(default_factory=list)
    partition_list: list[PartitionInfo] = field(default_factory=list)
    user: str = "root"
    admin: bool = False
    next_id: int = 42
    # jobs(fields=...): only those fields of each, as the server sends them; False: every
    # field, as a server that does not know fields= sends them
    fields: bool = True
    # with fields=, those at their default left out too where HalClient asks so
    # (``omit_defaults``, ADR 0028), as the server's list writes them
    omit_defaults: bool = True
    submitted: list[JobSubmit] = field(default_factory=list)
    cancelled: list[tuple[str, int | None]] = field(default_factory=list)
    batch_only: list[str] = field(default_factory=list)  # cancel(batch_only=True)'s ids
    steps_only: list[str] = field(default_factory=list)  # cancel(steps_only=True)'s ids
    command_exits: list[tuple[str, int, int]] = field(default_factory=list)  # set_command_exit
    actions: list[tuple[str, str]] = field(default_factory=list)
    updates: list[tuple[str, JobUpdate]] = field(default_factory=list)
    node_updates: list[tuple[str, str, str]] = field(default_factory=list)
    partition_updates: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    jobs_calls: list[dict[str, Any]] = field(default_factory=list)
    submit_error: Exception | None = None
    closed: bool = False
    min_job_age: int = 300
    topology_info: TopologyInfo = field(default_factory=lambda: TopologyInfo(configured=False))
    step_list: dict[int, list[StepInfo]] = field(default_factory=dict)  # running, by job

    # steps srun ran on the batch node: (job, step, node, ntasks, name) when opened, then
    # (job, step, exit code, signal, cancelled) in local_ends when reported
    local_steps: list[tuple[int, int, str, int, str]] = field(default_factory=list)
    local_ends: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    # each end's tasks: (rank, most resident bytes, CPU seconds, its user and system parts)
    local_tasks: list[list[tuple[int, int, float, float, float]]] = field(default_factory=list)

    def job_steps(self, job_id: int, *, validate: bool = True) -> list[StepInfo]:
        return answered(
            list(self.step_list.get(job_id, [])), validate=validate, schema="steps.StepList"
        )  # type: ignore[no-any-return]

    def running_steps(self) -> list[StepInfo]:
        return [s for job in sorted(self.step_list) for s in self.step_list[job]]

    def open_local_step(
        self,
        job_id: int,
        *,
        node: str,
        ntasks: int,
        name: str,
        argv: list[str],
        request: StepRequest | None = None,
        srun: str = "",
    ) -> LocalStep:
        step_id = sum(1 for s in self.local_steps if s[0] == job_id)
        self.local_steps.append((job_id, step_id, node, ntasks, name))
        return LocalStep(step_id, (), 0)

    def end_local_step(
        self,
        job_id: int,
        step_id: int,
        *,
        exit_code: int,
        exit_signal: int = 0,
        oom: bool = False,
        cancelled: bool = False,
        timed_out: bool = False,
        tasks: Sequence[tuple[int, int, float, float, float]] = (),
    ) -> None:
        self.local_ends.append((job_id, step_id, exit_code, exit_signal, cancelled))
        self.local_tasks.append(list(tasks))

    def submit(self, job: JobSubmit) -> SubmitResult:
        if self.submit_error is not None:
            raise self.submit_error
        self.submitted.append(job)
        tasks = []
        if job.array:
            tasks = [self.next_id + 1 + i for i in range(3)]
        return SubmitResult(job_id=self.next_id, task_ids=tasks)

    def submit_fields(self, fields: Mapping[str, object]) -> dict[str, Any]:
        """As the server takes a job's JSON: the schema reads and checks it (``job_of``
        raises what the server would refuse), then ``submit``."""
        result = self.submit(job_of(json.loads(json.dumps(fields))))
        return {"job_id": result.job_id, "task_ids": result.task_ids}

    def submit_het(self, components: list[JobSubmit]) -> list[int]:
        self.submitted.extend(components)
        return [self.next_id + i for i in range(len(components))]

    def test_only_het(self, components: list[JobSubmit]) -> list[WillRun]:
        return [self.test_only(c) for c in components]

    def test_only(self, job: JobSubmit) -> WillRun:
        self.submitted.append(job)
        return WillRun(
            job_id=self.next_id, expected_start=T0 + 60, nodes=["n1", "n2"], partition="debug"
        )

    def jobs(self, *, validate: bool = True, **query: Any) -> list[JobInfo]:
        """``validate=False``: read as ``HalClient`` reads the server's JSON then."""
        self.jobs_calls.append(query)
        out = []
        for info in self.job_list:
            finished = JobState(info.state).is_terminal
            if finished and not (query.get("include_finished") or query.get("history")):
                continue
            if query.get("ids") and not any(_matches(info, i) for i in query["ids"]):
                continue
            if query.get("users") and info.user not in query["users"]:
                continue
            if query.get("names") and info.name not in query["names"]:
                continue
            if query.get("partitions") and info.partition not in query["partitions"]:
                continue
            out.append(info)
        if not validate:
            fields = query.get("fields")
            listed = JobList(jobs=out)
            defaults = job_defaults(fields) if fields and self.omit_defaults else None
            if fields and self.fields and defaults:
                body = _without_defaults(out, fields)
                return records(body, defaults).jobs  # type: ignore[no-any-return]
            if fields and self.fields:
                body = listed.model_dump_json(include={"jobs": {"__all__": set(fields)}})
            else:
                body = listed.model_dump_json()
            return records(body).jobs  # type: ignore[no-any-return]
        return out

    def job(self, job_id: int | str, *, validate: bool = True) -> JobInfo:
        for info in self.job_list:
            if _matches(info, str(job_id)):
                return answered(info, validate=validate)  # type: ignore[no-any-return]
        raise NotFound(f"job {job_id} not found")

    def set_command_exit(self, job_id: int | str, exit_code: int, signal: int = 0) -> list[int]:
        found = [j.id for j in self.job_list if _matches(j, str(job_id))]
        if not found:
            raise NotFound(f"job {job_id} not found")
        self.command_exits.append((str(job_id), exit_code, signal))
        return found

    def cancel(
        self,
        job_id: int | str,
        *,
        signal: int | None = None,
        batch_only: bool = False,
        steps_only: bool = False,
    ) -> list[int]:
        found = [j.id for j in self.job_list if _matches(j, str(job_id))]
        if not found:
            raise NotFound(f"job {job_id} not found")
        self.cancelled.append((str(job_id), signal))
        if batch_only:
            self.batch_only.append(str(job_id))
        if steps_only:
            self.steps_only.append(str(job_id))
        return found

    def cancel_step(self, job_id: int, step_id: int, signum: int | None = None) -> None:
        running = [s.step_id for s in self.step_list.get(job_id, [])]
        if step_id not in running:
            raise NotFound(f"Job step {job_id}.{step_id} not found")
        self.cancelled.append((f"{job_id}.{step_id}", signum))

    def _action(self, name: str, job_id: int | str) -> list[int]:
        found = [j.id for j in self.job_list if _matches(j, str(job_id))]
        if not found:
            raise NotFound(f"job {job_id} not found")
        self.actions.append((name, str(job_id)))
        return found

    def hold(self, job_id: int | str, *, user: bool = False) -> list[int]:
        return self._action("uhold" if user else "hold", job_id)

    def release(self, job_id: int | str) -> list[int]:
        return self._action("release", job_id)

    def job_script(self, job_id: int | str) -> str:
        self._action("job_script", job_id)
        return f"#!/bin/sh\necho {job_id}\n"

    def requeue(self, job_id: int | str, *, hold: bool = False) -> list[int]:
        return self._action("requeuehold" if hold else "requeue", job_id)

    def suspend(self, job_id: int | str) -> list[int]:
        return self._action("suspend", job_id)

    def resume(self, job_id: int | str) -> list[int]:
        return self._action("resume", job_id)

    def update_job(self, job_id: int | str, update: JobUpdate) -> JobInfo:
        self.updates.append((str(job_id), update))
        return self.job(job_id)

    def nodes(self, *, validate: bool = True) -> list[NodeInfo]:
        return answered(list(self.node_list), validate=validate, schema="nodes.NodeList")  # type: ignore[no-any-return]

    def node(self, name: str) -> NodeInfo:
        for info in self.node_list:
            if info.name == name:
                return info
        raise NotFound(f"node {name} not found")

    def update_node(self, name: str, state: str, reason: str = "") -> NodeInfo:
        self.node_updates.append((name, state, reason))
        return self.node(name)

    def update_partition(self, name: str, change: PartitionChange) -> PartitionInfo:
        self.partition_updates.append((name, change.model_dump(exclude_none=True)))
        return next(p for p in self.partition_list if p.name == name)

    def partitions(self, *, validate: bool = True) -> list[PartitionInfo]:
        """As the server lists them: a partition of every node (configured ``nodes = []``)
        lists each node; ``partition(nodes=[...])`` names its members."""
        every = {"nodes": [n.name for n in self.node_list]}
        listed = [p if p.nodes else p.model_copy(update=every) for p in self.partition_list]
        return answered(listed, validate=validate)  # type: ignore[no-any-return]

    def topology(self) -> TopologyInfo:
        return self.topology_info

    def feedback_latest(self, job_ids: Sequence[int]) -> dict[int, JobFeedback]:
        return {i: self.feedback[i] for i in job_ids if i in self.feedback}

    def cluster_config(self, *, validate: bool = True) -> ClusterConfig:
        config = ClusterConfig(
            cluster_name="hal",
            min_job_age_seconds=self.min_job_age,
            kill_wait_seconds=30,
            version="0.1.0",
            scheduler_interval_seconds=1.0,
        )
        return answered(config, validate=validate, schema="nodes.ClusterConfig")  # type: ignore[no-any-return]

    def whoami(self, *, validate: bool = True) -> UserInfo:
        user = UserInfo(name=self.user, admin=self.admin)
        return user if validate else records(user.model_dump_json())  # type: ignore[no-any-return]

    def close(self) -> None:
        self.closed = True


def _matches(info: JobInfo, ident: str) -> bool:
    if "_" in ident:
        return info.display_id == ident
    return int(ident) in (info.id, info.array_job_id)


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def call(
    client: FakeClient,
    command: str,
    *argv: str,
    stdin: str = "",
    environ: dict[str, str] | None = None,
    cwd: str = "/home/root",
    now: float = T0 + 100,
) -> Result:
    out, err = io.StringIO(), io.StringIO()
    rc = run(
        command,
        list(argv),
        client_factory=lambda: client,
        stdout=out,
        stderr=err,
        stdin=io.StringIO(stdin),
        environ=environ if environ is not None else {"HOME": "/home/root"},
        cwd=cwd,
        clock=lambda: now,
        sleep=lambda s: None,
    )
    return Result(rc, out.getvalue(), err.getvalue())


def _without_defaults(infos: list[JobInfo], fields: list[str]) -> str:
    """``{"jobs": [...]}`` of ``infos`` with ``fields``, less those at their default, as
    the server answers ``omit_defaults=true``."""
    parts = [
        info.model_dump_json(
            include={
                n for n in fields if n not in JOB_DEFAULTS or getattr(info, n) != JOB_DEFAULTS[n]
            }
        )
        for info in infos
    ]
    return '{"jobs":[' + ",".join(parts) + "]}"
