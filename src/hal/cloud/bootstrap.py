"""Starting a node's agent where the provider cannot hand the instance a script.

EC2 runs a node's user data at boot; Lambda Cloud's API (its contract 1.5.3) takes
none. For such a provider the group names a program of the administrator's
(``bootstrap``, as Slurm's ``ResumeProgram``), which HAL runs on the server's host once
for each instance that the provider lists as running with an address, typically to
start ``hal agent`` on it over SSH. The program gets, in its environment:

- ``HAL_NODE``, ``HAL_INSTANCE_ID``, ``HAL_INSTANCE_IP``: the instance;
- ``HAL_SERVER_URL``, ``HAL_TOKEN``: what its agent joins with;
- ``HAL_CA_PEM``: for an https server, the PEM of the CA the agent is to trust (put it
  on the instance and point the agent's ``HAL_CA_FILE`` at it); "" otherwise;
- ``HAL_AGENT_ARGS``: the agent's options for the group's size, shell-quoted
  (``--server URL --name NODE --cpus N --memory NM --gpus G`` [``--features F``]
  [``--gpu-type T``]);
- ``HAL_CPUS``, ``HAL_MEMORY_MIB``, ``HAL_GPUS``, ``HAL_FEATURES``, ``HAL_GPU_TYPE``.

Its output goes to ``STATE/bootstrap/NODE.log``. An instance is bootstrapped once: a
marker (``STATE/bootstrapped/ID``) keeps a restarted server from running it again, and
goes when the instance is no longer listed. The launch (server URL and token) is kept
in ``STATE/launch.json`` (mode 0600), so a restarted server can start the agents of
instances launched before it stopped. A program that fails is logged with its log's
path; the node then does not join, and the autoscaler removes it at the group's boot
timeout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from hal.cloud.provider import RUNNING, Instance, Launch
from hal.core.errors import InvalidRequest
from hal.core.node_groups import NodeGroup

log = logging.getLogger("hal.cloud.bootstrap")


class Bootstrap:
    """Runs a group's ``bootstrap`` program for each of its new running instances."""

    def __init__(self, group: NodeGroup, command: str, state_dir: Path, setting: str) -> None:
        self.group = group
        try:
            self.command = shlex.split(command)
        except ValueError as err:
            raise InvalidRequest(f"{setting}: {err}", field=setting) from None
        if not self.command:
            raise InvalidRequest(f"{setting}: names no program", field=setting)
        self.state_dir = state_dir
        self._launch: Launch | None = None
        self._running: list[tuple[subprocess.Popen[bytes], str, Path]] = []
        self._warned = False

    def remember(self, launch: Launch) -> None:
        """The launch the agents join with (kept on disk for a restarted server)."""
        if launch == self._launch:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "launch.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(
                {"server_url": launch.server_url, "token": launch.token, "ca_pem": launch.ca_pem},
                out,
            )
        tmp.replace(path)
        self._launch = launch

    def run(self, listed: Sequence[tuple[Instance, str]]) -> None:
        """``listed``: every instance of the group the provider lists, with its address
        ("" without one). Starts the program for those running with an address and not
        bootstrapped yet; forgets the markers of instances no longer listed."""
        self._reap()
        markers = self.state_dir / "bootstrapped"
        ids = {inst.id for inst, _ in listed}
        if markers.is_dir():
            for marker in markers.iterdir():
                if marker.name not in ids:
                    marker.unlink(missing_ok=True)
        due = [(i, ip) for i, ip in listed if i.state == RUNNING and ip]
        due = [(i, ip) for i, ip in due if not (markers / i.id).exists()]
        if not due:
            return
        launch = self._launch or self._saved()
        if launch is None:
            if not self._warned:
                self._warned = True
                log.warning(
                    "cloud group %s: no launch saved in %s: the instances made before it "
                    "was kept are not bootstrapped",
                    self.group.name,
                    self.state_dir,
                )
            return
        markers.mkdir(parents=True, exist_ok=True)
        for instance, ip in due:
            (markers / instance.id).write_text(
                json.dumps({"node": instance.node, "ip": ip, "at": time.time()})
            )
            self._start(instance, ip, launch)

    def wait(self, timeout: float = 30.0) -> None:
        """Wait for the programs started to end (tests; a stopping server)."""
        deadline = time.monotonic() + timeout
        for proc, _, _ in self._running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        self._reap()

    def _start(self, instance: Instance, ip: str, launch: Launch) -> None:
        logs = self.state_dir / "bootstrap"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{instance.node}.log"
        env = {**os.environ, **self.environment(instance, ip, launch)}
        try:
            with open(path, "ab") as out:
                proc = subprocess.Popen(
                    self.command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as err:
            log.warning(
                "cloud group %s: bootstrap of node %s could not start %s: %s",
                self.group.name,
                instance.node,
                self.command[0],
                err,
            )
            return
        log.info("cloud group %s: bootstrapping node %s at %s", self.group.name, instance.node, ip)
        self._running.append((proc, instance.node, path))

    def environment(self, instance: Instance, ip: str, launch: Launch) -> dict[str, str]:
        res = self.group.resources
        memory_mib = max(1, res.memory_bytes >> 20)
        args = [
            "--server", launch.server_url,
            "--name", instance.node,
            "--cpus", str(res.cpus),
            "--memory", f"{memory_mib}M",
            "--gpus", str(res.gpus),
        ]  # fmt: skip
        if self.group.features:
            args += ["--features", ",".join(self.group.features)]
        if self.group.gpu_model:
            args += ["--gpu-type", self.group.gpu_model]
        return {
            "HAL_NODE": instance.node,
            "HAL_INSTANCE_ID": instance.id,
            "HAL_INSTANCE_IP": ip,
            "HAL_SERVER_URL": launch.server_url,
            "HAL_TOKEN": launch.token,
            "HAL_CA_PEM": launch.ca_pem,
            "HAL_AGENT_ARGS": shlex.join(args),
            "HAL_CPUS": str(res.cpus),
            "HAL_MEMORY_MIB": str(memory_mib),
            "HAL_GPUS": str(res.gpus),
            "HAL_FEATURES": ",".join(self.group.features),
            "HAL_GPU_TYPE": self.group.gpu_model,
        }

    def _saved(self) -> Launch | None:
        try:
            data = json.loads((self.state_dir / "launch.json").read_text())
            return Launch(
                server_url=str(data["server_url"]),
                token=str(data["token"]),
                ca_pem=str(data.get("ca_pem", "")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _reap(self) -> None:
        """Collect the programs that ended; log those that failed."""
        still = []
        for proc, node, path in self._running:
            code = proc.poll()
            if code is None:
                still.append((proc, node, path))
            elif code != 0:
                log.warning(
                    "cloud group %s: bootstrap of node %s exited %d; see %s",
                    self.group.name,
                    node,
                    code,
                    path,
                )
        self._running = still
