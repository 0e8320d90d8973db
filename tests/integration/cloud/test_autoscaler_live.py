"""The compute control plane live: a real control plane (``LiveServer``) with ``[cloud]``
groups of the local provider, whose nodes are real ``hal agent`` processes the server
starts for waiting jobs and stops once idle. One static node of 1 CPU, so that a job of
more CPUs can run only on a group's node.

Nothing is mocked: the jobs are submitted with ``hal sbatch``, the nodes, events and
jobs read back over the server's REST API (``GET /v1/nodes``, ``/v1/events``,
``/v1/jobs``) and ``hal sacct``, and the agents' processes found with psutil through
the local provider's records (``DATA/cloud/GROUP/instances/NODE.json``). The autoscaler
looks every half second and makes nodes for a job at once (``pending_seconds = 0``), so
the file runs in well under a minute.

The jobs are submitted as the HAL user named after the Unix user running the tests: a
root agent runs a job only as the user's own account, and the group's agents, unlike
``LiveServer``'s, are not started with ``--unknown-users-as-agent``, as a group's are by
default.

A node is "in the nodes list" here once its agent registered: ``GET /v1/nodes`` may also
list a group's names that have no node, as Slurm lists its powered-down cloud nodes
(flagged ``POWERED_DOWN``, or ``POWERING_UP`` while booting); those are left out.

Where the autoscaler makes one node too many for a job now and then (the bug that
``test_a_multi_node_job_whose_nodes_join_apart_gets_no_third_node`` shows), the other
tests check the nodes made for their jobs, not that no other was made.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from hal.slurm.syntax import compress_hostlist
from hal.testing.live import LiveServer, free_port, wait_until
from hal.wire.jobs import JobEvent, JobInfo

INTERVAL = 0.5  # [cloud] interval_seconds: how often the autoscaler looks
IDLE_REASON = "cloud: idle, being removed"
NOT_AVAILABLE = "Requested node configuration is not available"
NOT_REGISTERED = {"POWERED_DOWN", "POWERING_UP"}  # a group's name with no node (yet)
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def group_toml(
    name: str,
    nodes: str,
    *,
    cpus: int = 4,
    memory: str = "2G",
    price: float = 0.0,
    idle: float = 300,
    boot: float = 30,
) -> str:
    return f"""
[[cloud.groups]]
name = "{name}"
provider = "local"
nodes = "{nodes}"
cpus = {cpus}
memory = "{memory}"
price_per_hour = {price}
idle_seconds = {idle}
boot_timeout_seconds = {boot}
"""


def config_toml(*groups: str, server_url: str = "") -> str:
    url = f'server_url = "{server_url}"\n' if server_url else ""
    head = f"kill_wait_seconds = 2\n\n[cloud]\ninterval_seconds = {INTERVAL}\npending_seconds = 0\n"
    return head + url + "".join(groups)


@dataclass
class Cloud:
    """A control plane with ``[cloud]`` groups and a static 1-CPU node ``node1``."""

    server: LiveServer
    toml: Path
    workdir: Path
    user_token: str = ""
    urls: set[str] = field(default_factory=set)  # the URLs its agents were given

    @property
    def data(self) -> Path:
        return self.server.data_dir

    def sbatch(self, *args: str) -> int:
        done = self.submit(*args)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def submit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.server.cli(
            "sbatch", "--parsable", *args, token=self.user_token, cwd=self.workdir
        )

    def job(self, job_id: int) -> JobInfo:
        with self.server.client() as c:
            return c.job(job_id)

    def wait_done(self, job_id: int, timeout: float = 30) -> JobInfo:
        wait_until(lambda: self.job(job_id).state in DONE, timeout, message=f"job {job_id} to end")
        return self.job(job_id)

    def events(self, after: int = 0) -> list[JobEvent]:
        with self.server.client() as c:
            return list(c.events(after, follow=False))

    def kinds(self, kind: str, after: int = 0) -> list[JobEvent]:
        return [e for e in self.events(after) if e.kind == kind]

    def last_event_id(self) -> int:
        return max((e.id for e in self.events()), default=0)

    def nodes(self) -> dict[str, str]:
        """Registered node name → state, from ``GET /v1/nodes`` (not a group's names
        without a registered node, which Slurm lists as powered down or powering up)."""
        with self.server.client() as c:
            return {n.name: n.state for n in c.nodes() if not NOT_REGISTERED & set(n.state_flags)}

    def sacct(self, job_id: int) -> str:
        done = self.server.cli("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "NodeList,State")
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def record_path(self, group: str, node: str) -> Path:
        return self.data / "cloud" / group / "instances" / f"{node}.json"

    def record(self, group: str, node: str) -> dict[str, Any]:
        data = json.loads(self.record_path(group, node).read_text())
        assert isinstance(data, dict)
        return data

    def records(self, group: str) -> list[str]:
        folder = self.data / "cloud" / group / "instances"
        return sorted(p.stem for p in folder.glob("*.json")) if folder.exists() else []

    def restart(self) -> None:
        """Stop the control plane (its static agent too) and start a new one on the same
        data directory, database, port and hal.toml; the group's agents run on."""
        first = self.server
        first.stop()
        second = LiveServer(first.data_dir, port=first.port, config_file=self.toml)
        second.token = first.token
        second.start()
        self.server = second


def created_nodes(cloud: Cloud, after: int = 0) -> list[tuple[str, str, list[int]]]:
    """(node, group, jobs) of each ``cloud.node_created`` event, in order."""
    found = []
    for e in cloud.kinds("cloud.node_created", after):
        jobs, group = e.data["jobs"], e.data["group"]
        assert e.node is not None and isinstance(group, str) and isinstance(jobs, list)
        found.append((e.node, group, [int(j) for j in jobs]))
    return found


def agent_alive(record: dict[str, Any]) -> bool:
    """The record's agent process still runs (the same process: pid and start time)."""
    try:
        proc = psutil.Process(int(record["pid"]))
        return (
            abs(proc.create_time() - float(record["started"])) < 0.01
            and proc.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def agents_named(node: str, data: Path) -> list[int]:
    """The pids of the running ``hal agent --name NODE`` processes of this data dir."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "agent" not in cmd:
            continue
        if "--name" in cmd and cmd[cmd.index("--name") + 1] == node and str(data) in " ".join(cmd):
            found.append(proc.pid)
    return found


def leftovers(root: Path, urls: set[str]) -> list[psutil.Process]:
    """Processes of a test's cluster still running: a command line under its folder
    (agents, their state dirs), or started for one of its URLs (``HAL_URL``: agents,
    their step launchers)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if str(root) in " ".join(proc.info["cmdline"] or ()) or (
                proc.environ().get("HAL_URL") in urls
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def start_cloud(tmp_path: Path) -> Iterator[Callable[[str], Cloud]]:
    """``start_cloud(HAL_TOML)``: the cluster, its static node registered and the Unix
    user's HAL user added. Afterwards: the control plane stopped, the group nodes it
    left (as a stopped server does, by design) stopped, and nothing of the test's
    cluster left running."""
    made: list[Cloud] = []

    def start(toml_text: str) -> Cloud:
        toml = tmp_path / "hal.toml"
        toml.write_text(toml_text)
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        server = LiveServer(tmp_path / "data", config_file=toml)
        cloud = Cloud(server, toml, workdir)
        made.append(cloud)
        server.start()
        cloud.urls.add(server.url)
        for line in toml_text.splitlines():
            if line.startswith("server_url"):
                cloud.urls.add(line.split('"')[1])
        server.start_agent("node1", cpus=1, memory="1G")
        wait_until(lambda: cloud.nodes().get("node1") == "UP", message="node1 to register")
        user = getpass.getuser()
        cloud.user_token = server.add_users(user)[user]
        return cloud

    yield start
    for cloud in made:
        cloud.server.stop()
        for path in (cloud.data / "cloud").glob("*/instances/*.json"):
            with suppress(ValueError, OSError):
                record = json.loads(path.read_text())
                if agent_alive(record):
                    with suppress(ProcessLookupError):
                        os.killpg(int(record["pid"]), signal.SIGKILL)
        for proc in leftovers(tmp_path, cloud.urls):
            with suppress(psutil.Error):
                for member in [*proc.children(recursive=True), proc]:
                    member.kill()
        wait_until(
            lambda: not leftovers(tmp_path, cloud.urls),  # noqa: B023 - used at once
            10,
            message="the test's agents and step launchers to be gone",
        )


def test_a_job_too_big_for_the_static_nodes_gets_a_group_node_that_goes_once_idle(
    start_cloud: Callable[[str], Cloud],
) -> None:
    idle = 5.0  # long enough to read the node's record after its job ends, under load
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4, idle=idle)))
    job = cloud.sbatch("-c", "4", "-o", "out.txt", "--wrap", "echo on $SLURMD_NODENAME")
    # accepted at submit although no joined node has 4 CPUs; runs on the group's node
    info = cloud.wait_done(job)
    record = cloud.record("burst", "burst1")  # first: it goes with the node
    assert (info.state, info.nodes) == ("COMPLETED", ["burst1"])
    assert cloud.sacct(job) == "burst1|COMPLETED"
    assert (cloud.workdir / "out.txt").read_text() == "on burst1\n"
    assert created_nodes(cloud)[0] == ("burst1", "burst", [job])
    assert str(record["pid"]) == cloud.kinds("cloud.node_created")[0].data["instance"]
    assert agents_named("burst1", cloud.data) == [record["pid"]]

    wait_until(lambda: "burst1" not in cloud.nodes(), 30, message="burst1 to be removed")
    assert not cloud.record_path("burst", "burst1").exists()
    wait_until(lambda: not agent_alive(record), 5, message="burst1's agent to stop")
    assert agents_named("burst1", cloud.data) == []
    events = cloud.events()
    finished = next(e for e in events if e.kind == "job.finished" and e.job_id == job)
    after = [(e.kind, e.state, e.data.get("reason")) for e in events if e.node == "burst1"]
    assert after[-3:] == [
        ("node.updated", "DRAIN", IDLE_REASON),
        ("node.removed", None, IDLE_REASON),
        ("cloud.node_removed", None, None),
    ]
    drained = next(e for e in events if e.kind == "node.updated" and e.node == "burst1")
    assert drained.id > finished.id
    # not before its idle time, counted from the job's end as its agent reported it (the
    # job.finished event is written a moment later, when the server applies the report)
    assert info.end_time is not None
    assert drained.time - info.end_time >= idle - 0.05
    assert [node for node, _, _ in created_nodes(cloud)].count("burst1") == 1
    assert cloud.nodes()["node1"] == "UP"  # (a static node is never removed)


def test_the_cheapest_group_that_holds_a_job_is_opened(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """The big, dear group comes first in hal.toml: config order alone would open it."""
    cloud = start_cloud(
        config_toml(
            group_toml("big", "big[1-2]", cpus=4, price=1.0),
            group_toml("small", "small[1-2]", cpus=2, price=0.1),
        )
    )
    fits_both = cloud.sbatch("-c", "2", "--wrap", "true")
    assert cloud.wait_done(fits_both).nodes == ["small1"]
    only_big = cloud.sbatch("-c", "4", "--wrap", "true")
    assert cloud.wait_done(only_big).nodes == ["big1"]
    made = created_nodes(cloud)
    assert made[0] == ("small1", "small", [fits_both])
    assert ("big1", "big", [only_big]) in made
    assert {group for _, group, jobs in made if fits_both in jobs} == {"small"}
    assert {group for _, group, jobs in made if only_big in jobs} == {"big"}
    assert "small1" in cloud.records("small") and cloud.records("big")[:1] == ["big1"]


def test_a_multi_node_job_gets_as_many_nodes_of_the_group(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """Both nodes made in one pass. (How many in all is the next test's: the bug it
    shows makes a third node now and then here, when burst1 joins a pass before
    burst2.)"""
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-3]", cpus=2)))
    job = cloud.sbatch("-N", "2", "-c", "2", "--wrap", "true")
    info = cloud.wait_done(job)
    assert info.state == "COMPLETED"
    created = cloud.kinds("cloud.node_created")
    assert [(e.node, e.data["jobs"]) for e in created[:2]] == [("burst1", [job]), ("burst2", [job])]
    assert created[0].time == pytest.approx(created[1].time, abs=INTERVAL / 2)
    assert len(set(info.nodes)) == 2 and set(info.nodes) <= {e.node for e in created}
    assert cloud.sacct(job) == f"{compress_hostlist(sorted(info.nodes))}|COMPLETED"


def test_a_multi_node_job_whose_nodes_join_apart_gets_no_third_node(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """Machines boot in their own time: burst2's agent is held (SIGSTOP) from its start
    until burst1 has joined and the autoscaler has looked a few times."""
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-3]", cpus=2)))
    job = cloud.sbatch("-N", "2", "-c", "2", "--wrap", "true")
    late = cloud.record_path("burst", "burst2")
    wait_until(late.exists, 10, 0.002, message="burst2's agent to start")
    pid = int(cloud.record("burst", "burst2")["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: cloud.nodes().get("burst1") == "UP", 15, message="burst1 to join")
        if "burst2" in cloud.nodes():  # (not the bug: a failure, not an expected one)
            raise RuntimeError("burst2 joined before it was held")
        time.sleep(3 * INTERVAL)  # passes while the job waits for its second node
        created = [e.node for e in cloud.kinds("cloud.node_created")]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert created == ["burst1", "burst2"]
    info = cloud.wait_done(job)
    assert sorted(info.nodes) == ["burst1", "burst2"]


def test_a_node_that_never_joins_is_removed_and_its_group_rests(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """The nodes are told a URL where nothing listens: they never join."""
    boot = 1.5
    nowhere = f"http://127.0.0.1:{free_port()}"
    cloud = start_cloud(
        config_toml(group_toml("burst", "burst[1-2]", cpus=4, boot=boot), server_url=nowhere)
    )
    job = cloud.sbatch("-c", "4", "--wrap", "true")
    wait_until(lambda: bool(cloud.kinds("cloud.node_created")), 10, message="a node")
    first = cloud.record("burst", "burst1")
    wait_until(lambda: bool(cloud.kinds("cloud.boot_failed")), 10, message="the boot failure")
    (failed,) = cloud.kinds("cloud.boot_failed")
    created = cloud.kinds("cloud.node_created")[0]
    assert (failed.node, failed.data) == (
        "burst1",
        {"group": "burst", "instance": str(first["pid"])},
    )
    assert failed.time - float(first["created_at"]) >= boot
    assert created.node == "burst1"
    wait_until(lambda: not agent_alive(first), 15, message="the first node's agent to stop")
    # tried again once it has rested (the job still waits), not before
    wait_until(
        lambda: len(cloud.kinds("cloud.node_created")) >= 2, 15, message="a node after the rest"
    )
    again = cloud.kinds("cloud.node_created")[1]
    # (unrested, the same pass would make the next node, with the job still waiting)
    assert again.time - failed.time >= boot - INTERVAL / 2, "made while the group rested"
    assert again.data["instance"] != str(first["pid"])
    # a second failure in a row: the group rests twice as long before its third try
    wait_until(lambda: len(cloud.kinds("cloud.boot_failed")) >= 2, 15, message="a second failure")
    second = cloud.kinds("cloud.boot_failed")[1]
    wait_until(lambda: len(cloud.kinds("cloud.node_created")) >= 3, 20, message="a third try")
    third = cloud.kinds("cloud.node_created")[2]
    assert third.time - second.time >= 2 * boot - INTERVAL / 2, "the rest did not grow"
    waiting = cloud.job(job)
    # waiting for a node to be made, not "can never run" (BadConstraints)
    assert (waiting.state, waiting.reason) == ("PENDING", "Resources")
    assert "burst1" not in cloud.nodes()


def test_a_busy_node_stays_past_its_idle_time_and_goes_after_its_job(
    start_cloud: Callable[[str], Cloud],
) -> None:
    idle, runs = 1.0, 3.5
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4, idle=idle)))
    job = cloud.sbatch("-c", "4", "--wrap", f"sleep {runs}")
    wait_until(lambda: cloud.job(job).state == "RUNNING", 15, message="the job to run")
    started = time.monotonic()
    record = cloud.record("burst", "burst1")
    # well past idle_seconds (and several passes), with the job still running
    while time.monotonic() - started < idle + 3 * INTERVAL:
        time.sleep(INTERVAL / 2)
        assert cloud.nodes().get("burst1") == "UP" or cloud.job(job).state != "RUNNING"
    assert cloud.job(job).state == "RUNNING", "the job should still run: raise `runs`"
    assert [e.kind for e in cloud.events() if e.node == "burst1"] == [
        "cloud.node_created",
        "node.registered",
    ]
    assert agent_alive(record)
    info = cloud.wait_done(job)
    assert (info.state, info.nodes) == ("COMPLETED", ["burst1"])
    wait_until(lambda: "burst1" not in cloud.nodes(), 15, message="burst1 to be removed")
    wait_until(lambda: not agent_alive(record), 5, message="burst1's agent to stop")
    events = cloud.events()
    finished = next(e for e in events if e.kind == "job.finished" and e.job_id == job)
    drained = next(e for e in events if e.kind == "node.updated" and e.node == "burst1")
    assert drained.id > finished.id and drained.state == "DRAIN"
    assert [e.kind for e in events if e.node == "burst1"][-2:] == [
        "node.removed",
        "cloud.node_removed",
    ]


def test_a_job_no_node_or_group_can_hold_is_refused_at_submit(
    start_cloud: Callable[[str], Cloud],
) -> None:
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4, memory="2G")))
    refused = cloud.submit("-c", "8", "--wrap", "true")
    assert refused.returncode != 0
    assert NOT_AVAILABLE in refused.stderr
    assert "the largest node has 4 CPUs, 2048 MiB and 0 GPUs" in refused.stderr
    with cloud.server.client() as c:
        assert c.jobs(include_finished=True) == []
    assert cloud.kinds("cloud.node_created") == []
    assert cloud.records("burst") == []


def test_test_only_answers_for_a_job_only_a_group_node_can_hold(
    start_cloud: Callable[[str], Cloud],
) -> None:
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4)))
    estimate = cloud.submit("--test-only", "-c", "4", "--wrap", "true")
    assert estimate.returncode == 0, estimate.stderr
    # as Slurm counts its powered-down cloud nodes: the node it would be made on
    assert "using 4 processors on nodes burst1 in partition" in estimate.stderr
    assert cloud.records("burst") == []  # (a question only: no node is made for it)


def test_a_restarted_server_takes_back_its_group_node_and_token(
    start_cloud: Callable[[str], Cloud],
) -> None:
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4, idle=300)))
    first_job = cloud.sbatch("-c", "4", "--wrap", "true")
    assert cloud.wait_done(first_job).nodes == ["burst1"]
    record = cloud.record("burst", "burst1")
    token = (cloud.data / "cloud" / "agent-token").read_text()
    # the nodes' token serves the group's names only
    users = cloud.server.cli("user", "list")
    assert "hal-cloud (agent: burst[1-2])" in users.stdout, users.stdout

    mark = cloud.last_event_id()
    cloud.restart()
    # burst1's agent (the same process) registers again, with its token
    wait_until(
        lambda: any(e.node == "burst1" for e in cloud.kinds("node.registered", mark)),
        20,
        message="burst1 to register with the new server",
    )
    assert agent_alive(record)
    kept = cloud.data / "cloud" / "agent-token"
    assert kept.read_text() == token
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    second_job = cloud.sbatch("-c", "4", "--wrap", "true")
    assert cloud.wait_done(second_job).nodes == ["burst1"]
    time.sleep(2 * INTERVAL)  # passes that could wrongly make a second instance
    assert [e.node for e in cloud.kinds("cloud.node_created", mark)].count("burst1") == 0
    assert cloud.kinds("cloud.boot_failed", mark) == []
    assert cloud.record("burst", "burst1") == record
    assert agents_named("burst1", cloud.data) == [record["pid"]]
    assert cloud.nodes().get("burst1") == "UP"


def test_a_restarted_server_keeps_an_old_node_whose_agent_is_slow_to_sync(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """The node joined long ago (longer than the group's boot timeout: 300 s by default,
    so nearly every node of a server restarted in production); its agent is paused over
    the restart, as one that backs off while the server is away, and syncs a second
    after the new server's first pass. It is a joined node, not one that did not boot."""
    boot = 8.0  # long enough for a first join beside a loaded parallel run
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", idle=300, boot=boot)))
    job = cloud.sbatch("-c", "4", "--wrap", "true")
    assert cloud.wait_done(job).nodes == ["burst1"]
    record = cloud.record("burst", "burst1")
    wait_until(
        lambda: time.time() - float(record["created_at"]) > boot + INTERVAL,
        boot + 10,
        message="burst1 to be older than the boot timeout",
    )
    agent = int(record["pid"])
    os.kill(agent, signal.SIGSTOP)
    mark = cloud.last_event_id()
    try:
        cloud.restart()
        time.sleep(2 * INTERVAL)  # the new server's first passes, its agent not synced
    finally:
        os.kill(agent, signal.SIGCONT)
    wait_until(
        lambda: (
            any(e.node == "burst1" for e in cloud.kinds("node.registered", mark))
            or not agent_alive(record)
        ),
        20,
        message="burst1 to register again, or be removed",
    )
    assert cloud.kinds("cloud.boot_failed", mark) == []
    assert agent_alive(record)
    assert cloud.nodes().get("burst1") == "UP"


def test_a_typed_gpu_job_runs_on_the_node_made_for_it(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """The node is told its group's GPU type: a --gres=gpu:a100:1 job fits the node made
    for it (before, it joined untyped, the job could not use it, and the group made and
    removed nodes for it for ever)."""
    gpu = group_toml("gpu", "gpu[1-2]", cpus=4, idle=1) + 'gpus = 2\ngpu_type = "nvidia_a100"\n'
    cloud = start_cloud(config_toml(gpu))
    refused = cloud.submit("--gres=gpu:h100:1", "--wrap", "true")
    assert refused.returncode != 0
    assert "the cluster's types: nvidia_a100" in refused.stderr, refused.stderr
    job = cloud.sbatch("--gres=gpu:a100:1", "--wrap", "true")
    assert cloud.wait_done(job).nodes == ["gpu1"]
    assert [e.node for e in cloud.kinds("cloud.node_created")] == ["gpu1"]


def test_a_removed_local_node_takes_its_running_job_with_it(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """As a terminated instance would: the agent's fork server and the job, in sessions
    of their own that an agent's SIGTERM leaves for its successor, go too (`hal up`'s
    Ctrl-C left them running, and the requeued job ran twice at once)."""
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4)))
    marker = cloud.workdir / "started"
    job = cloud.sbatch("-c", "4", "--wrap", f"touch {marker}; exec sleep 300")
    wait_until(marker.exists, 20, message="the job to start on burst1")
    agent = psutil.Process(int(cloud.record("burst", "burst1")["pid"]))
    spawned = agent.children(recursive=True)
    assert any("sleep" in " ".join(p.cmdline()) for p in spawned), spawned
    service = cloud.server.server.cloud  # type: ignore[attr-defined]
    service.stop_local_nodes()

    def alive(p: psutil.Process) -> bool:
        with suppress(psutil.Error):
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        return False

    assert not alive(agent)
    assert [p for p in spawned if alive(p)] == []
    assert cloud.job(job).state == "RUNNING"  # (until its node times out: NODE_FAIL)


def test_a_node_an_operator_drained_is_kept_until_resumed(
    start_cloud: Callable[[str], Cloud],
) -> None:
    cloud = start_cloud(config_toml(group_toml("burst", "burst[1-2]", cpus=4, idle=1)))
    job = cloud.sbatch("-c", "4", "--wrap", "sleep 2")
    wait_until(lambda: cloud.job(job).state == "RUNNING", 20, message="the job to start")
    drained = cloud.server.cli(
        "scontrol", "update", "nodename=burst1", "state=drain", "reason=maint"
    )
    assert drained.returncode == 0, drained.stderr
    cloud.wait_done(job)
    time.sleep(1 + 4 * INTERVAL)  # past its idle_seconds: kept, drained, with its reason
    assert cloud.nodes().get("burst1") == "DRAIN"
    assert cloud.kinds("cloud.node_removed") == []
    resumed = cloud.server.cli("scontrol", "update", "nodename=burst1", "state=resume")
    assert resumed.returncode == 0, resumed.stderr
    wait_until(lambda: "burst1" not in cloud.nodes(), 10, message="burst1 to idle out")


def test_a_multi_node_job_takes_a_static_node_and_makes_the_rest(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """-N 3 on the idle static node1 and two groups: one node of each group is made,
    the cheaper first (before, a job needing nodes of several kinds waited for ever)."""
    cheap = group_toml("cheap", "cheap1", cpus=2, price=0.5)
    dear = group_toml("dear", "dear[1-2]", cpus=2, price=2.0)
    cloud = start_cloud(config_toml(dear, cheap))
    job = cloud.sbatch("-N", "3", "--wrap", "true")
    assert sorted(cloud.wait_done(job).nodes) == ["cheap1", "dear1", "node1"]
    assert sorted(e.node or "" for e in cloud.kinds("cloud.node_created")) == ["cheap1", "dear1"]


def test_explain_names_the_node_being_made_for_a_job(start_cloud: Callable[[str], Cloud]) -> None:
    """While the node made for a job boots (here: never joins), `hal explain` says so."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    cloud = start_cloud(
        config_toml(group_toml("burst", "burst[1-2]", cpus=4, boot=60), server_url=nowhere)
    )
    other = cloud.sbatch("-c", "1", "--wrap", "sleep 30")  # fits node1: nothing is made for it
    wait_until(lambda: cloud.job(other).state == "RUNNING", 10, message="the small job to start")
    job = cloud.sbatch("-c", "4", "--wrap", "true")
    wait_until(lambda: bool(cloud.kinds("cloud.node_created")), 10, message="a node")
    with cloud.server.client() as c:
        info = c.explain(job)
        assert info.cloud_nodes == ["burst1"]
        assert c.explain(other).cloud_nodes == []
    assert re.search(
        r"\[cloud\] made node\(s\) for it: burst1 \(group burst, \d+ s ago\); it can start "
        "once they join",
        info.detail,
    ), info.detail
    shown = cloud.server.cli("explain", str(job)).stdout
    assert "made node(s) for it: burst1" in shown


def reconfigure(cloud: Cloud, toml_text: str) -> str:
    """hal.toml rewritten and ``scontrol reconfigure``: its output."""
    cloud.toml.write_text(toml_text)
    done = cloud.server.cli("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_a_group_added_by_reconfigure_makes_nodes_without_a_restart(
    start_cloud: Callable[[str], Cloud],
) -> None:
    cloud = start_cloud(config_toml())  # [cloud] without a group: no autoscaler
    refused = cloud.submit("-c", "4", "--wrap", "true")
    assert refused.returncode != 0 and NOT_AVAILABLE in refused.stderr
    # a provider setting it does not know: refused, naming it, and nothing taken
    cloud.toml.write_text(
        config_toml(group_toml("burst", "burst1") + "[cloud.groups.local]\nx = 1\n")
    )
    bad = cloud.server.cli("scontrol", "reconfigure")
    assert bad.returncode != 0 and "unknown setting 'x'" in bad.stderr, bad.stderr
    with cloud.server.client() as c:
        assert c.cloud_status().groups == []
    shown = reconfigure(cloud, config_toml(group_toml("burst", "burst[1-2]", cpus=4)))
    assert "kept" not in shown, shown  # [cloud] is taken, not kept until a restart
    job = cloud.sbatch("-c", "4", "-o", "out.txt", "--wrap", "echo on $SLURMD_NODENAME")
    assert cloud.wait_done(job, 40).state == "COMPLETED"
    assert (cloud.workdir / "out.txt").read_text() == "on burst1\n"
    listed = cloud.server.cli("cloud").stdout
    assert re.search(r"^burst\s+local\s+1/2\s+4", listed, re.M), listed


def test_a_group_taken_out_by_reconfigure_drains_its_node_and_removes_it_after_its_job(
    start_cloud: Callable[[str], Cloud],
) -> None:
    burst = group_toml("burst", "burst[1-2]", cpus=4)  # idle for 300 s: it would stay
    cloud = start_cloud(config_toml(burst, group_toml("other", "other1", cpus=2)))
    go = cloud.workdir / "go"
    job = cloud.sbatch("-c", "4", "--wrap", f"while [ ! -e {go} ]; do sleep 0.1; done")
    wait_until(lambda: cloud.job(job).state == "RUNNING", 30, message="the job to start")
    record = cloud.record("burst", "burst1")
    reconfigure(cloud, config_toml(group_toml("other", "other1", cpus=2)))
    reason = "cloud: group burst left [cloud], being removed"
    wait_until(lambda: cloud.nodes().get("burst1") == "DRAIN", 10, message="burst1 drained")
    with cloud.server.client() as c:
        node = next(n for n in c.nodes() if n.name == "burst1")
        assert node.reason == reason
        groups = {g.name: g.retiring for g in c.cloud_status().groups}
    assert groups == {"other": False, "burst": True}
    assert "taken out of [cloud]" in cloud.server.cli("cloud").stdout
    time.sleep(4 * INTERVAL)
    assert cloud.job(job).state == "RUNNING"  # its job runs on, on the drained node
    go.touch()
    assert cloud.wait_done(job).state == "COMPLETED"
    wait_until(lambda: "burst1" not in cloud.nodes(), 15, message="burst1 to be removed")
    wait_until(lambda: not agent_alive(record), 10, message="burst1's agent to stop")

    def removed() -> list[object]:
        events = cloud.kinds("cloud.node_removed")
        return [e.data.get("retired") for e in events if e.node == "burst1"]

    # (the event follows the node's removal once the instance is gone)
    wait_until(lambda: removed() != [], 15, message="burst1's removal event")
    assert removed() == [True]
    with cloud.server.client() as c:
        wait_until(
            lambda: [g.name for g in c.cloud_status().groups] == ["other"], 10, message="gone"
        )
    # the group's nodes could still join while it retired; now the token serves "other" only
    users = cloud.server.cli("user", "list").stdout
    assert re.search(r"hal-cloud \(agent: other1\)", users), users
    # a job only the group's nodes could hold is refused now
    refused = cloud.submit("-c", "4", "--wrap", "true")
    assert refused.returncode != 0 and NOT_AVAILABLE in refused.stderr


def burst_config(boot: float) -> str:
    """A group of 1-CPU nodes (so a job that fits node1 fits them too) whose nodes are
    expected to take ``boot`` seconds to join; backfill (and so the forecast starts the
    decision reads) on every pass, not every 30 s."""
    group = group_toml("burst", "burst[1-2]", cpus=1, memory="1G") + f"boot_seconds = {boot}\n"
    return config_toml(group) + "\n[scheduler.plugin_args.backfill]\ninterval_s = 0\n"


def test_a_job_that_starts_on_the_static_node_before_a_new_one_would_boot_gets_none(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """node1 is busy for at most a minute (its job's time limit); a new node would take
    five: the waiting job is not worth one, waits for node1, and `hal explain` shows
    the comparison."""
    cloud = start_cloud(burst_config(boot=300))
    first = cloud.sbatch("-c", "1", "-t", "1", "--wrap", "sleep 50")  # ended below
    wait_until(lambda: cloud.job(first).state == "RUNNING", 10, message="the first job to start")
    second = cloud.sbatch("-c", "1", "-t", "1", "--wrap", "true")
    with cloud.server.client() as c:
        wait_until(
            lambda: (b := c.explain(second).burst) is not None and b.expected_start is not None,
            10,
            message="the autoscaler to judge the second job on its forecast start",
        )
        burst = c.explain(second).burst
    assert burst is not None and burst.group is None
    assert burst.expected_start is not None and "no later than" in burst.why
    (o,) = burst.offers
    assert (o.group, o.nodes, o.soon_enough) == ("burst", 1, False)
    assert o.ready_at == pytest.approx(burst.decided_at + 300)
    assert burst.expected_start < o.ready_at
    shown = cloud.server.cli("explain", str(second)).stdout
    assert "cloud: none (it waits)" in shown and "burst " in shown, shown
    assert cloud.server.cli("scancel", str(first)).returncode == 0
    assert cloud.wait_done(second).nodes == ["node1"]
    assert cloud.kinds("cloud.node_created") == []


def test_a_job_that_would_wait_long_gets_a_node_unless_it_says_never(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """node1 is held for an hour (its job's limit); a node boots in a second: a waiting
    job gets one at once, one with --burst-after=never keeps waiting (it may still take
    a node made for another once that has room)."""
    cloud = start_cloud(burst_config(boot=1))
    long = cloud.sbatch("-c", "1", "-t", "60", "--wrap", "sleep 300")
    wait_until(lambda: cloud.job(long).state == "RUNNING", 10, message="the long job to start")
    eager = cloud.sbatch("-c", "1", "-t", "5", "--wrap", "sleep 10")
    patient = cloud.sbatch("-c", "1", "-t", "5", "--burst-after=never", "--wrap", "true")
    wait_until(lambda: cloud.job(eager).state == "RUNNING", 20, message="the eager job to start")
    assert cloud.job(eager).nodes == ["burst1"]
    with cloud.server.client() as c:
        wait_until(lambda: c.explain(patient).burst is not None, 10, message="a decision")
        burst = c.explain(patient).burst
    assert cloud.job(patient).state == "PENDING"
    assert burst is not None and burst.group is None and burst.patience_seconds is None
    assert "--burst-after=never" in burst.why
    made = created_nodes(cloud)
    assert made == [("burst1", "burst", [eager])]


def test_a_group_out_of_capacity_rests_and_its_job_goes_to_the_next_group(
    start_cloud: Callable[[str], Cloud],
) -> None:
    """The cheap group has no capacity (the local provider's ``capacity = 0``, as a
    cloud out of machines answers): in the same pass the job's node is made in the dear
    group; the cheap group rests, healthy, with the capacity answer as its error."""
    cheap = group_toml("cheap", "cheap[1-2]", cpus=4, price=0.1) + (
        "[cloud.groups.local]\ncapacity = 0\n"
    )
    dear = group_toml("dear", "dear[1-2]", cpus=4, price=1.0)
    cloud = start_cloud(config_toml(cheap, dear))
    job = cloud.sbatch("-c", "4", "--wrap", "true")
    assert cloud.wait_done(job).nodes == ["dear1"]
    [failed] = cloud.kinds("cloud.create_failed")
    assert failed.data["group"] == "cheap" and failed.data["capacity"] is True
    created = created_nodes(cloud)
    assert created[0] == ("dear1", "dear", [job])
    assert failed.id < cloud.kinds("cloud.node_created")[0].id
    with cloud.server.client() as c:
        groups = {g.name: g for g in c.cloud_status().groups}
    assert groups["cheap"].healthy and groups["cheap"].resting_until is not None
    assert "holds at most 0 instance" in groups["cheap"].last_error
    assert groups["dear"].healthy and not groups["dear"].last_error


def test_a_provider_that_does_not_answer_is_unhealthy_and_jobs_go_elsewhere(
    start_cloud: Callable[[str], Cloud], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Lambda group whose endpoint refuses connections is the cheapest that holds the
    job: its listing fails, it is marked unhealthy with the reason, and the job's node
    is made in the local group; `hal cloud` says so."""
    monkeypatch.setenv("LAMBDA_API_KEY", "test-key")
    dead = f"http://127.0.0.1:{free_port()}"
    gpu = f"""
[[cloud.groups]]
name = "gpu"
provider = "lambda"
nodes = "gpu[1-2]"
cpus = 4
memory = "2G"
price_per_hour = 0.01
[cloud.groups.lambda]
instance_type = "gpu_1x_a100"
regions = ["us-tx-1"]
ssh_key_names = ["hal"]
endpoint_url = "{dead}"
timeout_seconds = 2
"""
    cloud = start_cloud(config_toml(gpu, group_toml("burst", "burst[1-2]", cpus=4, price=1.0)))
    job = cloud.sbatch("-c", "4", "--wrap", "true")
    assert cloud.wait_done(job).nodes == ["burst1"]
    with cloud.server.client() as c:
        groups = {g.name: g for g in c.cloud_status().groups}
    assert not groups["gpu"].healthy and groups["gpu"].unhealthy_since is not None
    assert f"listing instances: Lambda Cloud (group gpu): could not list instances: {dead}" in (
        groups["gpu"].last_error
    )
    assert groups["gpu"].resting_until is not None  # (the alert HalCloudGroupResting)
    assert groups["burst"].healthy
    shown = cloud.server.cli("cloud").stdout
    assert re.search(r"^gpu: UNHEALTHY for \d+:\d\d:\d\d: its provider fails", shown, re.M), shown
