"""A ``[cloud]`` group's nodes in ``sinfo``, ``scontrol show node`` and the REST node
listings, live, as Slurm 22.05.8 shows its cloud nodes (``hal.api.cloud_nodes``): a name
not created yet is powered down (``idle~``, ``IDLE+CLOUD+POWERED_DOWN``), one whose
instance boots is powering up (``idle#``), a registered one an ordinary node with the
``CLOUD`` flag, and once the autoscaler removed it for idleness it is ``idle~`` again.

A real control plane (``LiveServer``) with a static 1-CPU node and a group of the local
provider, whose nodes are ``hal agent`` processes the server starts for a waiting job
(at once: ``pending_seconds = 0``) and stops once idle. The commands run as a user
would (``hal sinfo``, ``hal scontrol``); the REST listings are read over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until

INTERVAL = 0.5  # [cloud] interval_seconds
IDLE = 3.0  # the group's idle_seconds: long enough to see the node idle
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def config(*, server_url: str = "", boot: float = 30) -> str:
    url = f'server_url = "{server_url}"\n' if server_url else ""
    return f"""
[cloud]
interval_seconds = {INTERVAL}
pending_seconds = 0
{url}
[[cloud.groups]]
name = "burst"
provider = "local"
nodes = "burst[1-2]"
cpus = 4
memory = "2G"
features = ["cloud", "c7i"]
idle_seconds = {IDLE}
boot_timeout_seconds = {boot}
[cloud.groups.local]
agent_args = "--unknown-users-as-agent"
"""


def _agent_alive(record: dict[str, object]) -> bool:
    try:
        proc = psutil.Process(int(str(record["pid"])))
        same = abs(proc.create_time() - float(str(record["started"]))) < 0.01
        return same and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, ValueError):
        return False


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[str], LiveServer]]:
    """``start(HAL_TOML)``: the control plane with its static node ``node1`` registered.
    Afterwards the server stopped and the group's agents it left (as a stopped server
    does, by design) killed."""
    made: list[LiveServer] = []

    def run(text: str) -> LiveServer:
        toml = tmp_path / "hal.toml"
        toml.write_text(text)
        server = LiveServer(tmp_path / "data", config_file=toml)
        made.append(server)
        server.start()
        server.start_agent("node1", cpus=1, memory="1G")
        wait_until(lambda: "node1" in registered(server), 20, message="node1 to register")
        return server

    yield run
    for server in made:
        server.stop()
        records = list((server.data_dir / "cloud").glob("*/instances/*.json"))
        for path in records:
            with suppress(ValueError, OSError):
                record = json.loads(path.read_text())
                if _agent_alive(record):
                    with suppress(ProcessLookupError):
                        os.killpg(int(record["pid"]), signal.SIGKILL)


def registered(server: LiveServer) -> set[str]:
    with server.client() as c:
        return {n.name for n in c.nodes() if "POWERED_DOWN" not in n.state_flags}


def shown(server: LiveServer) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Node → (sinfo's base state, flags), as ``GET /v1/nodes`` lists them."""
    with server.client() as c:
        return {n.name: (n.display_state, tuple(n.state_flags)) for n in c.nodes()}


def hal(server: LiveServer, *args: str) -> list[str]:
    done = server.cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def states(server: LiveServer) -> dict[str, str]:
    """``sinfo -N -h -o "%N %t"``: node → sinfo's state."""
    lines = hal(server, "sinfo", "-N", "-h", "-o", "%N %t")
    return dict(line.split() for line in lines)


def scontrol_state(server: LiveServer, name: str) -> str:
    line = next(x for x in hal(server, "scontrol", "show", "node", name) if "State=" in x)
    return line.split()[0]


def job_state(server: LiveServer, job: int) -> str:
    with server.client() as c:
        return c.job(job).state


def sbatch(server: LiveServer, *args: str) -> int:
    done = server.cli("sbatch", "--parsable", "-o", "/dev/null", *args, cwd=server.data_dir)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


DOWN = ("idle", ("CLOUD", "POWERED_DOWN"))
BOOTING = ("idle", ("CLOUD", "NOT_RESPONDING", "POWERING_UP"))
RUNNING = ("alloc", ("CLOUD",))
IDLE_AFTER = ("idle", ("CLOUD",))
GOING = ("idle", ("CLOUD", "POWERING_DOWN"))


def lifecycle(server: LiveServer) -> list[tuple[str, tuple[str, ...]]]:
    """Submit a job only a group node can hold and follow burst1 over REST (every 50 ms)
    until it is powered down again after its job: what it showed, in order. While the
    job runs, sinfo and scontrol show an ordinary node with the CLOUD flag."""
    seen = [shown(server)["burst1"]]  # before the job: a poll after it may find it made
    job = sbatch(server, "-c", "4", "--wrap", "sleep 10")  # long enough to see, loaded
    running_checked = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        now = shown(server)["burst1"]
        if seen[-1] != now:
            seen.append(now)
        if not running_checked and now == RUNNING:
            assert states(server)["burst1"] == "alloc"
            assert scontrol_state(server, "burst1") == "State=ALLOCATED+CLOUD"
            running_checked = True
        if running_checked and now == DOWN:
            break
        time.sleep(0.05)
    assert running_checked, seen
    assert job_state(server, job) in DONE
    return seen


def test_group_nodes_are_powered_down_then_up_then_down_again(
    start: Callable[[str], LiveServer],
) -> None:
    server = start(config())
    # before any job: the group's names, powered down, with the group's size
    assert hal(server, "sinfo") == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      2  idle~ burst[1-2]",
        "debug*       up   infinite      1   idle node1",
    ]
    assert hal(server, "sinfo", "-N", "-h", "-o", "%N %t %T %c %m %f") == [
        "burst1 idle~ idle~ 4 2048 cloud,c7i",
        "burst2 idle~ idle~ 4 2048 cloud,c7i",
        "node1 idle idle 1 1024 (null)",
    ]
    # hal nodes shows sinfo's state, suffix and all
    listed = {line.split()[0]: line.split()[1] for line in hal(server, "nodes")[1:]}
    assert listed == {"burst1": "idle~", "burst2": "idle~", "node1": "idle"}
    shown_node = hal(server, "scontrol", "show", "node", "burst1")
    assert shown_node[:2] == [
        "NodeName=burst1 CoresPerSocket=1",
        "   CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=N/A",
    ]
    assert (
        "   State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
        "MCS_label=N/A"
    ) in shown_node
    assert "   RealMemory=2048 AllocMem=0 FreeMem=N/A Sockets=4 Boards=1" in shown_node
    assert "   NodeAddr=burst1 NodeHostName=burst1" in shown_node
    assert any(
        line.startswith("   Nodes=burst[1-2],node1")
        for line in hal(server, "scontrol", "show", "partition", "debug")
    )
    # the slurmrestd facade lists them too
    rest = http.get(
        f"{server.url}/slurm/v0.0.45/node/burst2",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=10,
    )
    assert rest.status_code == 200, rest.text
    assert rest.json()["nodes"][0]["state"] == ["IDLE", "CLOUD", "POWERED_DOWN"]
    assert rest.json()["nodes"][0]["cpus"] == 4

    # a job only a group node can hold: burst1 is made for it, boots, joins, runs the
    # job, idles, and is removed
    seen = lifecycle(server)
    assert seen[0] == DOWN
    assert seen.index(BOOTING) < seen.index(RUNNING), seen
    # idle after its job for the group's idle_seconds, then powering down as the
    # autoscaler drains and removes it, then powered down
    after = seen[seen.index(RUNNING) :]
    assert IDLE_AFTER in after, seen
    if GOING in after:  # (as long as its agent takes to stop: may be too short to see)
        assert after.index(IDLE_AFTER) < after.index(GOING), seen
    assert not [s for s in seen if s[0] == "drain"], seen  # never drained, as Slurm's
    assert seen[-1] == DOWN
    # removed: powered down again, in sinfo and scontrol too
    assert states(server) == {"burst1": "idle~", "burst2": "idle~", "node1": "idle"}
    assert scontrol_state(server, "burst1") == "State=IDLE+CLOUD+POWERED_DOWN"


def test_a_removed_node_does_not_show_as_booting(start: Callable[[str], LiveServer]) -> None:
    seen = lifecycle(start(config()))
    assert BOOTING not in seen[seen.index(RUNNING) :], seen


def test_a_node_that_boots_is_powering_up(start: Callable[[str], LiveServer]) -> None:
    """Its agent is told a URL where nothing listens: it boots until its boot timeout."""
    server = start(config(server_url=f"http://127.0.0.1:{free_port()}", boot=60))
    job = sbatch(server, "-c", "4", "--wrap", "true")
    wait_until(
        lambda: shown(server)["burst1"][1] != ("CLOUD", "POWERED_DOWN"),
        20,
        message="burst1 to be made",
    )
    assert states(server) == {"burst1": "idle#", "burst2": "idle~", "node1": "idle"}
    assert hal(server, "sinfo") == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "debug*       up   infinite      1  idle# burst1",
        "debug*       up   infinite      1  idle~ burst2",
        "debug*       up   infinite      1   idle node1",
    ]
    assert scontrol_state(server, "burst1") == "State=IDLE+CLOUD+NOT_RESPONDING+POWERING_UP"
    assert hal(server, "sinfo", "-h", "-t", "powering_up", "-o", "%N") == ["burst1"]
    assert hal(server, "sinfo", "-h", "-d", "-o", "%N") == ["burst1"]  # not responding
    # the job waits for it, as Slurm's would be configuring on it
    assert job_state(server, job) == "PENDING"
    with server.client() as c:
        assert c.job(job).nodes == []
