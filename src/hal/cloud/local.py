"""The local provider: each node is a ``hal agent`` process on this machine.

Made for trying the autoscaler out (``make up`` with a ``[cloud]`` group) and for tests:
the agent offers the group's CPUs, memory, GPUs and features, whatever the host has, so
a laptop can stand in for a group of large machines. Each instance's record (pid, start
time) is a JSON file in the provider's state folder, so a restarted server finds its
processes again, as EC2's tags let the EC2 provider do. A record whose process is gone
(or whose pid now belongs to another process) is dropped when the instances are listed.

A spot group (``market = "spot"``) lends interruptible capacity as EC2's does: each of its
instances gets a metadata service of its own (``hal.cloud.imds.ImdsStandIn``, in the
server's process, its URL in the record as ``imds``), which its agent reads with
``--interruption-notice``. ``POST {imds}/hal/interrupt?in=SECONDS`` gives the
instance a notice, and at the notice's time the instance is stopped as EC2 would stop
it. A restarted server's earlier instances have no metadata service any more.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from hal.cloud.imds import ImdsStandIn
from hal.cloud.provider import (
    RUNNING,
    CapacityError,
    Instance,
    Launch,
    Price,
    ProviderError,
    check_known_settings,
)
from hal.core.errors import InvalidRequest
from hal.core.node_groups import SPOT, NodeGroup

log = logging.getLogger(__name__)
STOP_WAIT_S = 10.0  # SIGTERM, then SIGKILL after this
# [cloud.groups.local]: more `hal agent` options, e.g. "--unknown-users-as-agent";
# capacity: the most instances the group has at once (beyond: a capacity error, as a
# cloud out of machines answers; for trying the autoscaler's fallback to the next group);
# price_file: a file whose number is the group's published price an hour (a stand-in for
# a provider's price list: change the file and the server's next price reading follows it)
SETTINGS = ("agent_args", "capacity", "price_file")


class LocalProvider:
    def __init__(self, group: NodeGroup, cluster: str, state_dir: Path) -> None:
        self.group = group
        self.cluster = cluster
        self.state_dir = state_dir
        self._records = state_dir / "instances"
        self._imds: dict[str, ImdsStandIn] = {}  # a spot group's, by node name
        check_known_settings(group, SETTINGS)
        try:
            self.agent_args = shlex.split(group.settings.get("agent_args", ""))
        except ValueError as err:
            raise InvalidRequest(
                f"[cloud.groups.local] agent_args of group {group.name!r}: {err}",
                field=f"cloud.groups.{group.name}.local.agent_args",
            ) from None
        capacity = group.settings.get("capacity", "")
        if capacity and not capacity.isdigit():
            raise InvalidRequest(
                f"[cloud.groups.local] capacity of group {group.name!r}: must be a whole "
                f"number of instances, e.g. capacity = 2 (got {capacity!r})",
                field=f"cloud.groups.{group.name}.local.capacity",
            )
        self.capacity = int(capacity) if capacity else None

    def prices(self) -> list[Price]:
        """The group's price: its ``price_file``'s number where it names one (read now;
        a missing file or one that holds no price raises ``ProviderError``), else the
        configured ``price_per_hour``."""
        path = self.group.settings.get("price_file", "")
        if not path:
            return [Price(self.group.name, self.group.price_per_hour, "config", time.time())]
        try:
            text = Path(path).read_text().strip()
            observed = Path(path).stat().st_mtime
        except OSError as err:
            raise ProviderError(f"reading the price file {path}: {err.strerror}") from None
        try:
            price = float(text)
        except ValueError:
            price = -1.0
        if not 0 <= price < 1e6:
            raise ProviderError(f"the price file {path} holds {text[:40]!r}, not a price")
        return [Price(self.group.name, price, f"price file {path}", observed)]

    def create(self, names: Sequence[str], launch: Launch) -> list[Instance]:
        """An agent per name; a name whose agent runs already gets that one back (a
        create retried after its answer was lost starts nothing new)."""
        self._records.mkdir(parents=True, exist_ok=True)
        have = {i.node: i for i in self.instances()} if names else {}
        count = len(have)
        started: list[Instance] = []
        failure: ProviderError | None = None
        for name in names:
            if name in have:
                started.append(have[name])
                continue
            if self.capacity is not None and count >= self.capacity:
                failure = CapacityError(
                    f"local group {self.group.name} has no capacity for node {name}: it "
                    f"holds at most {self.capacity} instance(s) (capacity in "
                    "[cloud.groups.local])"
                )
                break
            try:
                started.append(self._start(name, launch))
                count += 1
            except OSError as err:
                log.warning("local provider: could not start node %s: %s", name, err)
                failure = ProviderError(f"could not start an agent for {name}: {err}")
        if failure is not None and not started:
            raise failure
        return started

    def _start(self, name: str, launch: Launch) -> Instance:
        node_dir = self.state_dir / "nodes" / name
        node_dir.mkdir(parents=True, exist_ok=True)
        res = self.group.resources
        cmd = [
            sys.executable, "-m", "hal.cli.main", "agent",
            "--server", launch.server_url,
            "--name", name,
            "--cpus", str(res.cpus),
            "--memory", f"{max(1, res.memory_bytes >> 20)}M",
            "--gpus", str(res.gpus),
            "--state-dir", str(node_dir),
        ]  # fmt: skip
        if self.group.features:
            cmd += ["--features", ",".join(self.group.features)]
        if self.group.gpu_model:
            cmd += ["--gpu-type", self.group.gpu_model]
        imds = self._metadata(name) if self.group.market == SPOT else None
        if imds is not None:
            cmd += ["--interruption-notice", imds.url]
        cmd += self.agent_args
        env = {**os.environ, "HAL_TOKEN": launch.token, "HAL_URL": launch.server_url}
        if launch.ca_pem:  # an https server: the agent trusts the CA the launch names
            ca = node_dir / "ca.pem"
            ca.write_text(launch.ca_pem)
            env["HAL_CA_FILE"] = str(ca)
        try:
            with open(node_dir / "agent.log", "ab") as out:
                proc = subprocess.Popen(
                    cmd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # not the server's signals; outlives a restart
                )
        except OSError:
            if imds is not None:
                self._imds.pop(name, None)
                imds.stop()
            raise
        created = time.time()
        record = {
            "pid": proc.pid,
            "started": psutil.Process(proc.pid).create_time(),
            "cluster": self.cluster,
            "group": self.group.name,
            "node": name,
            "created_at": created,
        }
        if imds is not None:
            record["imds"] = imds.url
            imds.on_action = lambda action: self._reclaim(name, proc.pid)
        tmp = self._records / f".{name}.json"
        tmp.write_text(json.dumps(record))
        tmp.replace(self._records / f"{name}.json")
        return Instance(str(proc.pid), name, self.group.name, RUNNING, created)

    def _metadata(self, name: str) -> ImdsStandIn:
        """A new metadata service for node ``name``'s new instance."""
        old = self._imds.pop(name, None)
        if old is not None:
            old.stop()
        imds = ImdsStandIn(instance_id=f"i-local-{name}").start()
        self._imds[name] = imds
        return imds

    def _reclaim(self, name: str, pid: int) -> None:
        """The notice's time has come: the instance goes, as EC2 takes a spot instance."""
        log.info("local provider: spot instance %s (pid %d) taken back", name, pid)
        self.remove([Instance(str(pid), name, self.group.name, RUNNING, 0.0)])

    def instances(self) -> list[Instance]:
        found: list[Instance] = []
        for path in sorted(self._records.glob("*.json")):
            record = _read(path)
            if record is None or record["cluster"] != self.cluster:
                continue
            if record["group"] != self.group.name:
                continue
            if _alive(record):
                found.append(
                    Instance(
                        str(record["pid"]),
                        str(record["node"]),
                        self.group.name,
                        RUNNING,
                        float(str(record["created_at"])),
                    )
                )
            else:
                path.unlink(missing_ok=True)
        return found

    def remove(self, instances: Sequence[Instance]) -> None:
        """Stop each instance as a machine's termination would: its agent, and every
        process the agent started (its fork server and jobs, in sessions of their own,
        which an agent's SIGTERM leaves running for its successor to adopt)."""
        records = {}
        spawned: list[psutil.Process] = []
        for inst in instances:
            path = self._records / f"{inst.node}.json"
            record = _read(path)
            if record is None or str(record["pid"]) != inst.id:
                continue  # gone, or the name's record is a newer instance's
            records[path] = record
            imds = self._imds.pop(inst.node, None)
            if imds is not None:  # (first: once its agent is gone, the instance is unlisted)
                imds.stop()
            with contextlib.suppress(psutil.Error):
                spawned += psutil.Process(int(str(record["pid"]))).children(recursive=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(str(record["pid"])), signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for path, record in records.items():
            while _alive(record) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(record):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(str(record["pid"])), signal.SIGKILL)
            path.unlink(missing_ok=True)
        _kill_all(spawned)


def _kill_all(processes: list[psutil.Process]) -> None:
    """SIGKILL ``processes`` and whatever they started meanwhile."""
    everyone = list(processes)
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            everyone += proc.children(recursive=True)
    for proc in dict.fromkeys(everyone):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(everyone, timeout=5)


def _read(path: Path) -> dict[str, object] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _alive(record: dict[str, object]) -> bool:
    """The record's process is still the one it started (a pid may be reused)."""
    try:
        proc = psutil.Process(int(str(record["pid"])))
        return (
            abs(proc.create_time() - float(str(record["started"]))) < 0.01
            and proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.Error, KeyError, ValueError):
        return False
