"""The node's containers (hal.agent.containers): the runtime chosen for the host's cgroup
layout, and refused saying what to install; ``podman run``'s options keeping the job's
user, folders, cgroup, memory and CPUs; OCI bundles read from their config.json; and,
on real podman, an image loaded once per digest and removed with its evicted copy."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from hal.agent.artifacts import ArtifactCache
from hal.agent.containers import (
    IMAGES,
    ContainerError,
    Containers,
    Prepared,
    Runtime,
    Shape,
    cgroup_parent,
    choose_runtime,
    container_plan,
    image_args,
    read_bundle,
    run_options,
    unified_cgroups_only,
)
from hal.agent.isolation import Isolation
from hal.agent.supervisor import StepPlan
from hal.host.oci import image_facts, node_architecture
from hal.testing.images import make_bundle, make_image, make_rootfs
from hal.wire.agent import ArtifactPin, ContainerPin

RUNC = {"runc": "/usr/sbin/runc"}
BOTH = {"crun": "/usr/bin/crun", **RUNC}
RUNTIME = Runtime("/usr/bin/podman", "/usr/sbin/runc", "/state/containers.conf", False)


def test_runc_on_a_hybrid_host_crun_on_a_cgroup2_one() -> None:
    assert choose_runtime("/usr/bin/podman", BOTH, unified_only=False) == "/usr/sbin/runc"
    assert choose_runtime("/usr/bin/podman", BOTH, unified_only=True) == "/usr/bin/crun"
    assert choose_runtime("/usr/bin/podman", RUNC, unified_only=True) == "/usr/sbin/runc"


def test_a_host_without_what_it_needs_is_told_what_to_install() -> None:
    with pytest.raises(ContainerError, match="no podman: install podman and runc"):
        choose_runtime(None, BOTH, unified_only=True)
    with pytest.raises(ContainerError, match="crun refuses this host's cgroup1 layout"):
        choose_runtime("/usr/bin/podman", {"crun": "/usr/bin/crun"}, unified_only=False)
    with pytest.raises(ContainerError, match="install crun or runc"):
        choose_runtime("/usr/bin/podman", {}, unified_only=True)


def test_the_cgroup_layout_is_read_from_the_mounts(tmp_path: Path) -> None:
    hybrid = tmp_path / "hybrid"
    hybrid.write_text(
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    )
    unified = tmp_path / "unified"
    unified.write_text("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\nproc /proc proc rw 0 0\n")
    assert not unified_cgroups_only(str(hybrid))
    assert unified_cgroups_only(str(unified))
    assert not unified_cgroups_only(str(tmp_path / "none"))


def test_podman_keeps_the_jobs_user_folders_cgroup_memory_and_cpus() -> None:
    isolation = Isolation("cgroup1", "/sys/fs/cgroup/memory/hal/node1.ab12")
    group = isolation.group_path(7, 0)
    shape = Shape(
        uid=1000,
        gid=100,
        groups=(100, 27),
        workdir="/home/u/run",
        mounts=("/home/u/run", "/var/spool/job"),
        cgroup_parent=cgroup_parent(isolation, group),
        memory_bytes=104857600,
        cpu_ids=(2, 3),
    )
    argv = run_options(RUNTIME, shape, name="hal-node1-7.0")
    joined = " ".join(argv)
    assert argv[:5] == ["/usr/bin/podman", "--runtime", "/usr/sbin/runc", "run", "--rm"]
    assert "--user 1000:100 --group-add=27" in joined
    assert "--workdir /home/u/run" in joined
    assert "--volume /home/u/run:/home/u/run --volume /var/spool/job:/var/spool/job" in joined
    assert "--cgroup-parent /hal/node1.ab12/job_7.0" in joined
    assert "--memory 104857600 --memory-swap 104857600" in joined
    assert "--cpuset-cpus 2,3" in joined
    assert "--replace --name hal-node1-7.0" in joined
    rootless = run_options(Runtime("podman", "crun", "c", True), shape)
    assert "--userns keep-id" in " ".join(rootless) and "--user" not in rootless
    assert "--name" not in rootless  # (each task of a step: podman names it)


def test_without_cgroups_there_is_no_parent() -> None:
    assert cgroup_parent(Isolation("rlimit"), "") == ""
    assert cgroup_parent(Isolation("cgroup2", "/sys/fs/cgroup/hal/n.1"), "") == ""


def test_an_image_or_a_bundles_root_file_system_overlaid() -> None:
    assert image_args(Prepared(image_id="abc")) == ["abc"]
    bundle = Prepared(rootfs="/b/rootfs", env=("A=1",))
    assert image_args(bundle) == ["--env=A=1", "--rootfs", "/b/rootfs:O"]


def test_a_bundle_is_read_from_its_config(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b", marker="m1")
    read = read_bundle(str(bundle))
    assert read.rootfs == str(bundle / "rootfs")
    assert "BUNDLE=m1" in read.env
    with pytest.raises(ContainerError, match="no OCI bundle there"):
        read_bundle(str(tmp_path / "nowhere"))
    (bundle / "config.json").write_text("{not json")
    with pytest.raises(ContainerError, match=r"config\.json is not JSON"):
        read_bundle(str(bundle))
    (bundle / "config.json").write_text('{"root": {"path": "elsewhere"}}')
    with pytest.raises(ContainerError, match=r"root file system .* is missing"):
        read_bundle(str(bundle))


class Channel:
    def __init__(self, contents: dict[str, bytes]) -> None:
        self.contents = contents

    async def artifact(self, sha256: str, write: Callable[[bytes], object]) -> None:
        write(self.contents[sha256])


def _exists(image_id: str, conf: str) -> bool:
    env = {**os.environ, "CONTAINERS_CONF": conf}
    done = subprocess.run(["podman", "image", "exists", image_id], env=env, check=False)
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="rootful podman: run as root")
def test_an_image_is_loaded_once_and_removed_with_its_evicted_copy(tmp_path: Path) -> None:
    path = make_image(
        make_rootfs(tmp_path / "rootfs", f"evict-{os.getpid()}"), tmp_path / "i.oci.tar"
    )
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    live: set[int] = {1}
    cache = ArtifactCache(tmp_path / "artifacts", Channel({digest: data}), 1, lambda: live)
    containers = Containers(cache, tmp_path / "containers")
    pin = ContainerPin(image=ArtifactPin(name="i", version="1", sha256=digest, kind="image"))
    image_id = image_facts(path).image_id
    try:
        for job in (1, 2):
            prepared = asyncio.run(containers.prepare(job, pin))
            assert prepared.image_id == image_id
        assert containers.loads == 1
        conf = containers.runtime().conf
        assert _exists(image_id, conf)
        assert (cache.root / IMAGES / digest).read_text() == image_id
        live.clear()  # the jobs ended: the cache (1 byte at most) evicts the copy
        cache.evict(set())
        assert not (cache.root / f"{digest}.program").exists()
        assert not _exists(image_id, conf)
        assert not (cache.root / IMAGES / digest).exists()
    finally:
        subprocess.run(["podman", "rmi", "--force", image_id], capture_output=True, check=False)


def test_an_image_for_another_architecture_is_refused(tmp_path: Path) -> None:
    other = "arm64" if node_architecture() != "arm64" else "amd64"
    path = make_image(make_rootfs(tmp_path / "rootfs"), tmp_path / "o.oci.tar", other)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    cache = ArtifactCache(tmp_path / "artifacts", Channel({digest: data}), 1 << 30, lambda: [])
    containers = Containers(cache, tmp_path / "containers")
    containers._runtime = RUNTIME  # (no podman is run: the check comes first)
    pin = ContainerPin(image=ArtifactPin(name="o", version="1", sha256=digest, kind="image"))
    with pytest.raises(ContainerError, match=f"is for linux/{other}, and this node is"):
        asyncio.run(containers.prepare(1, pin))


def test_the_batch_plan_runs_behind_podman_as_root_with_its_gpus_from_0() -> None:
    plan = StepPlan(
        job_id=7,
        attempt=0,
        job_dir="/state/jobs/7.0",
        argv=("/bin/sh", "/state/jobs/7.0/slurm_script"),
        env={"SLURM_JOB_ID": "7", "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "3,5"},
        workdir="/",
        stdout_path="/slurm-7.out",
        stderr_path=None,
        append=False,
        memory_bytes=0,
        gpus=True,
        uid=1000,
        gid=100,
    )
    isolation = Isolation("cgroup2", "/sys/fs/cgroup/hal/n.1")
    wrapped = container_plan(
        plan,
        Prepared(image_id="abc"),
        RUNTIME,
        name="hal-n-7.0",
        isolation=isolation,
        group=isolation.group_path(7, 0),
        gpus=[3, 5],
    )
    assert wrapped.runtime  # the supervisor runs podman as root
    assert wrapped.argv[-3:] == ("abc", "/bin/sh", "/state/jobs/7.0/slurm_script")
    assert "--env=SLURM_JOB_ID" in wrapped.argv and "--env=PATH" not in wrapped.argv
    assert "--volume" in wrapped.argv and "/state/jobs/7.0:/state/jobs/7.0" in wrapped.argv
    assert "/hal/n.1/job_7.0" in wrapped.argv
    assert wrapped.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert wrapped.env["CONTAINERS_CONF"] == RUNTIME.conf
