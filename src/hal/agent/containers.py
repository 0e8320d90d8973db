"""The node's containers (``--container``; docs/user/environments.md).

A job that names a container runs its batch script, and each of its steps' tasks, in it,
through podman:

- **Image** (an artifact of kind ``image``, an OCI image layout tarball): its copy comes
  through the artifact cache (``ArtifactCache.copy``: fetched once per node, held by the
  job, evicted with the cache); its config's architecture is checked against the node's
  before the job starts; it is loaded into podman's storage once per node per digest
  (``podman load``), under its config digest, which is podman's image ID. When the cache
  evicts the copy, the loaded image is removed too.
- **Bundle** (an OCI bundle folder on the node, Slurm's ``--container`` form): its root
  file system (``config.json``'s ``root.path``) is run with ``--rootfs PATH:O``, an overlay
  that leaves the bundle as it is, with ``process.env`` as the image's variables.

The runtime: podman, with the OCI runtime chosen for the host (``choose_runtime``): crun
where the host has the unified cgroup2 hierarchy alone, else runc (crun refuses a hybrid
or cgroup1 layout). HAL writes its own ``containers.conf`` (``STATE_DIR/containers``) and
points podman at it with ``CONTAINERS_CONF``: ``default_ulimits = []`` (the job gets the
limits it was started with; hosts that refuse ``setrlimit`` in a container fail with
podman's defaults), the cgroupfs manager (the job's cgroup is a folder, not a systemd
unit), no ``pids_limit`` of podman's own.

In the container the job keeps what it has outside: its user (``--user UID:GID`` and its
groups; a rootless agent: ``--userns keep-id``), its working directory and output files
(bind-mounted at the same paths), its variables (``SLURM_*`` and the rest, except
``PATH``: the image's), its cgroup (``--cgroup-parent``: the container's cgroup is a
child of the job's, under its limits) with its memory limit and CPUs shown
(``--memory``, ``--cpuset-cpus``), and its GPUs only (CDI ``nvidia.com/gpu=N`` where the
node has an NVIDIA CDI spec, else the ``/dev/nvidia*`` devices of those GPUs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hal.agent.artifacts import ArtifactCache
from hal.agent.environment import cuda_devices
from hal.agent.isolation import Isolation
from hal.agent.stepkeeper import env_flags
from hal.agent.supervisor import StepPlan
from hal.host.oci import ImageFacts, image_facts, node_architecture
from hal.wire.agent import ContainerPin

log = logging.getLogger("hal.agent")

LOAD_TIMEOUT_S = 1800.0
CONF = """\
# written by HAL's agent for its container jobs (hal.agent.containers)
[containers]
default_ulimits = []
pids_limit = 0
log_driver = "k8s-file"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "{runtime}"
"""
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
IMAGES = ".images"  # artifact digest -> the podman image ID loaded from it


class ContainerError(Exception):
    """The job cannot run in its container on this node; the job fails saying so."""


@dataclass(frozen=True, slots=True)
class Runtime:
    podman: str
    oci: str  # "runc" or "crun"
    conf: str  # HAL's containers.conf
    rootless: bool


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a job runs in: a loaded image's ID, or a bundle's root file system."""

    image_id: str = ""
    rootfs: str = ""
    env: tuple[str, ...] = ()  # a bundle's process.env: NAME=VALUE


def choose_runtime(podman: str | None, runtimes: dict[str, str], unified_only: bool) -> str:
    """The OCI runtime podman is given here: crun on a cgroup2-only host, else runc;
    ContainerError saying what to install where there is none that can run."""
    if podman is None:
        raise ContainerError(
            "this node has no podman: install podman and runc (Debian: apt-get install "
            "podman runc) to run jobs with --container"
        )
    order = ("crun", "runc") if unified_only else ("runc",)
    for name in order:
        if name in runtimes:
            return runtimes[name]
    wanted = "crun or runc" if unified_only else "runc (crun refuses this host's cgroup1 layout)"
    raise ContainerError(f"this node has no OCI runtime podman can use here: install {wanted}")


def find_runtime(folder: Path) -> Runtime:
    """podman and the OCI runtime it can use on this host, with HAL's containers.conf
    written in ``folder``; ContainerError saying what to install where there is none.
    The agent's containers use it, and so do image builds (``hal artifact push
    --dockerfile``): podman's defaults fail on hosts that refuse ``setrlimit`` in a
    container, or that crun's cgroup layout check refuses."""
    found = {n: p for n in ("crun", "runc") if (p := shutil.which(n) or _sbin(n))}
    podman = shutil.which("podman")
    oci = choose_runtime(podman, found, unified_cgroups_only())
    assert podman is not None  # (choose_runtime said so)
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "containers.conf"
    conf.write_text(CONF.format(runtime=Path(oci).name))
    return Runtime(podman, oci, str(conf), os.geteuid() != 0)


def unified_cgroups_only(mounts: str = "/proc/self/mounts") -> bool:
    """Whether the host mounts the cgroup2 hierarchy and no cgroup1 one."""
    try:
        with open(mounts) as f:
            kinds = {line.split()[2] for line in f if len(line.split()) > 2}
    except OSError:
        return False
    return "cgroup2" in kinds and "cgroup" not in kinds


class Containers:
    def __init__(self, cache: ArtifactCache, folder: Path) -> None:
        self.cache = cache
        self.folder = folder  # HAL's containers.conf
        self._runtime: Runtime | None = None
        self._loading: dict[str, asyncio.Future[str]] = {}
        # artifact digest -> its image's facts, once read and loaded by this agent
        self._loaded: dict[str, ImageFacts] = {}
        self.loads = 0  # images loaded into podman here (tests, metrics)
        cache.on_remove.append(self._evicted)

    def runtime(self) -> Runtime:
        """The node's runtime, found once; ContainerError where there is none."""
        if self._runtime is None:
            self._runtime = find_runtime(self.folder)
            log.info("containers run with podman and %s (%s)", self._runtime.oci, self.folder)
        return self._runtime

    async def prepare(self, job_id: int, pin: ContainerPin) -> Prepared:
        """The job's image loaded (or its bundle read), refused where it cannot run."""
        runtime = await asyncio.to_thread(self.runtime)
        if pin.bundle:
            return await asyncio.to_thread(read_bundle, pin.bundle)
        assert pin.image is not None
        place = await self.cache.copy(job_id, pin.image)
        known = self._loaded.get(pin.image.sha256)
        if known is not None:  # (its copy is held: eviction removes neither)
            return Prepared(image_id=known.image_id)
        facts = await asyncio.to_thread(image_facts, place / "file")
        check_runs_here(facts, str(pin.image.name) + "@" + pin.image.version)
        running = self._loading.get(facts.image_id)
        if running is None:
            work = asyncio.to_thread(self._load, runtime, place / "file", pin.image.sha256, facts)
            running = asyncio.ensure_future(work)
            self._loading[facts.image_id] = running
            running.add_done_callback(lambda _: self._loading.pop(facts.image_id, None))
        return Prepared(image_id=await asyncio.shield(running))

    def _load(self, runtime: Runtime, file: Path, sha256: str, facts: ImageFacts) -> str:
        """``podman load`` once per image: the ID it has in podman's storage."""
        record = self.cache.root / IMAGES / sha256
        exists = _podman(runtime, ["image", "exists", facts.image_id], check=False)
        if exists.returncode != 0:
            done = _podman(runtime, ["load", "--quiet", "--input", str(file)], check=False)
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip()[-2000:]
                raise ContainerError(f"podman cannot load the image: {said}")
            self.loads += 1
            log.info("image %s loaded into podman (%s)", facts.image_id[:12], file)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(facts.image_id)
        self._loaded[sha256] = facts
        return facts.image_id

    def _evicted(self, copy: str) -> None:
        """The cache removed a copy: an image loaded from it goes too."""
        sha256 = copy.removesuffix(".program")
        self._loaded.pop(sha256, None)
        record = self.cache.root / IMAGES / sha256
        if self._runtime is None or not record.exists():
            return
        with contextlib.suppress(OSError):
            image_id = record.read_text().strip()
            record.unlink()
            _podman(self._runtime, ["rmi", "--force", image_id], check=False)
            log.info("image %s removed from podman with its copy", image_id[:12])


def check_runs_here(facts: ImageFacts, name: str) -> None:
    here = node_architecture()
    if facts.os != "linux" or facts.architecture != here:
        raise ContainerError(
            f"image {name} is for {facts.os}/{facts.architecture}, and this node is "
            f"linux/{here}: publish a {here} image (podman build --platform linux/{here}), "
            "or send the job to nodes of that architecture"
        )


def read_bundle(bundle: str) -> Prepared:
    """An OCI bundle's root file system and variables, from its ``config.json``."""
    try:
        with open(os.path.join(bundle, "config.json")) as f:
            config = json.load(f)
    except OSError as err:
        raise ContainerError(
            f"--container={bundle}: no OCI bundle there ({err.strerror}): a bundle is a "
            "folder with config.json and its root file system, on every node of the job"
        ) from err
    except ValueError as err:
        raise ContainerError(f"--container={bundle}: config.json is not JSON ({err})") from err
    root = str((config.get("root") or {}).get("path") or "rootfs")
    rootfs = os.path.normpath(os.path.join(bundle, root))
    if not os.path.isdir(rootfs):
        raise ContainerError(f"--container={bundle}: its root file system {rootfs} is missing")
    env = tuple(str(e) for e in (config.get("process") or {}).get("env") or ())
    return Prepared(rootfs=rootfs, env=env)


@dataclass(frozen=True, slots=True)
class Shape:
    """What of a job (or a step's tasks) the container keeps: its user, folders, cgroup,
    memory, CPUs and GPUs."""

    uid: int | None
    gid: int | None
    groups: tuple[int, ...]
    workdir: str
    mounts: tuple[str, ...]
    cgroup_parent: str  # "" without cgroups
    memory_bytes: int
    cpu_ids: tuple[int, ...]
    gpus: tuple[int, ...] = ()
    gpu_minors: tuple[int, ...] = ()


def run_options(runtime: Runtime, shape: Shape, name: str = "") -> list[str]:
    """``podman run`` and its options for ``shape``: all but the variables and the image."""
    argv = [runtime.podman, "--runtime", runtime.oci, "run", "--rm"]
    if name:
        argv += ["--replace", "--name", name]
    argv += ["--network", "host", "--ipc", "host", "--init=false"]
    argv += ["--log-driver", "none", "--attach", "stdout", "--attach", "stderr"]
    if runtime.rootless:
        argv += ["--userns", "keep-id"]
    elif shape.uid is not None and shape.gid is not None:
        argv += ["--user", f"{shape.uid}:{shape.gid}"]
        argv += [f"--group-add={g}" for g in shape.groups if g != shape.gid]
    argv += ["--workdir", shape.workdir]
    for folder in shape.mounts:
        argv += ["--volume", f"{folder}:{folder}"]
    if shape.cgroup_parent:
        argv += ["--cgroup-parent", shape.cgroup_parent]
    if shape.memory_bytes > 0:
        memory = str(shape.memory_bytes)
        argv += ["--memory", memory, "--memory-swap", memory]
    if shape.cpu_ids:
        argv += ["--cpuset-cpus", ",".join(map(str, shape.cpu_ids))]
    return argv + _gpu_devices(shape.gpus, shape.gpu_minors)


def image_args(prepared: Prepared) -> list[str]:
    """The image (or a bundle's root file system, overlaid: the bundle stays as it is),
    after the bundle's own variables."""
    argv = [f"--env={line}" for line in prepared.env]
    return argv + (["--rootfs", f"{prepared.rootfs}:O"] if prepared.rootfs else [prepared.image_id])


def container_plan(
    plan: StepPlan,
    prepared: Prepared,
    runtime: Runtime,
    *,
    name: str,
    isolation: Isolation,
    group: str,
    gpus: Sequence[int] = (),
    gpu_minors: Sequence[int] = (),
) -> StepPlan:
    """``plan`` run in the container: its argv behind podman's."""
    shape = Shape(
        uid=plan.uid,
        gid=plan.gid,
        groups=plan.groups,
        workdir=plan.workdir,
        mounts=tuple(mounts(plan.workdir, (plan.stdout_path, plan.stderr_path), plan.job_dir)),
        cgroup_parent=cgroup_parent(isolation, group),
        memory_bytes=plan.memory_bytes,
        cpu_ids=plan.cpu_ids,
        gpus=tuple(gpus),
        gpu_minors=tuple(gpu_minors),
    )
    env = {**plan.env, "CONTAINERS_CONF": runtime.conf}
    if gpus:  # the container has the job's GPUs alone: CUDA numbers them from 0
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices(list(gpus), isolated=True)
    argv = [*run_options(runtime, shape, name), *env_flags(env), *image_args(prepared)]
    return replace(plan, argv=(*argv, *plan.argv), env=env, runtime=not runtime.rootless)


def cgroup_parent(isolation: Isolation, group: str) -> str:
    """The job's (or step's) cgroup as podman's ``--cgroup-parent`` (its path below the
    hierarchy's mount); "" without cgroups."""
    if not group or not isolation.base:
        return ""
    mount = isolation.base.rsplit("/hal/", 1)[0]
    return "/" + os.path.relpath(group, mount)


def mounts(workdir: str, files: Iterable[str | None] = (), spool: str = "") -> list[str]:
    """The folders the job reaches at the same paths inside: its working directory, its
    output files', and its spooled script's (``spool``: made after the plan)."""
    folders = [workdir]
    for path in files:
        if path:
            folders.append(os.path.dirname(path) or workdir)
    out = [os.path.normpath(spool)] if spool else []
    for folder in map(os.path.normpath, folders):
        if folder not in out and folder != "/" and os.path.isdir(folder):
            out.append(folder)
    return out


def _gpu_devices(gpus: Sequence[int], minors: Sequence[int]) -> list[str]:
    """The job's GPUs only: CDI names where the node has an NVIDIA CDI spec, else the
    device files (with the driver's control devices)."""
    if not gpus:
        return []
    if any(Path(d).is_dir() and any(Path(d).glob("nvidia*")) for d in CDI_DIRS):
        return [f"--device=nvidia.com/gpu={g}" for g in gpus]
    devices = [f"/dev/nvidia{minors[g] if g < len(minors) else g}" for g in gpus]
    devices += [d for d in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")]
    return [f"--device={d}" for d in devices if os.path.exists(d)]


def _sbin(name: str) -> str | None:
    for folder in ("/usr/sbin", "/sbin", "/usr/local/sbin"):
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    return None


def _podman(runtime: Runtime, args: list[str], *, check: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": runtime.conf}
    try:
        return subprocess.run(
            [runtime.podman, "--runtime", runtime.oci, *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=LOAD_TIMEOUT_S,
            check=check,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise ContainerError(f"cannot run podman: {err}") from err
