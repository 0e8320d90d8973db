"""GPU device isolation against the kernel: a job's process opens only its own GPUs'
device files, through cgroup1's ``devices`` controller and through cgroup2's eBPF device
filter (``hal.agent.devices``).

The GPUs' device files are made here with ``mknod`` (major 195, as NVIDIA's driver's).
Without the driver, opening an allowed one fails with ENXIO ("no such device"); a denied
one fails with EPERM before the driver is asked. Needs root (CI runs as root)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.agent import devices
from hal.agent.config import AgentConfig
from hal.agent.devices import NVIDIA_MAJOR, DeviceControlError, load_program
from hal.agent.gpus import GpuInventory, denied_minors, device_choice
from hal.agent.isolation import BPF, Isolation, detect_isolation
from hal.core.errors import InvalidRequest

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="cgroups and mknod need root")


@pytest.fixture
def gpu_files(tmp_path: Path) -> list[str]:
    """/dev/nvidia0 and /dev/nvidia1 look-alikes."""
    paths = []
    for minor in (0, 1):
        path = tmp_path / f"nvidia{minor}"
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))
        except PermissionError:
            pytest.skip("mknod is not allowed here")
        paths.append(str(path))
    return paths


def opened_by_job(isolation: Isolation, group: str, paths: list[str]) -> list[str]:
    """What a process that entered ``group`` gets opening each path: "denied" (EPERM)
    or "reached" (opened, or refused by the device itself)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the job process
        code = 0
        try:
            os.close(read)
            isolation.enter(group, 0, gpus=False)
            answers = []
            for path in paths:
                try:
                    os.close(os.open(path, os.O_RDWR))
                    answers.append("reached")
                except OSError as err:
                    answers.append("denied" if err.errno == errno.EPERM else "reached")
            os.write(write, ",".join(answers).encode())
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the job process failed to enter its cgroup"
    return text.split(",")


@contextlib.contextmanager
def cgroup2_mount(tmp_path: Path) -> Iterator[str]:
    """The host's cgroup2 hierarchy, or one mounted here (a cgroup1 host: device filters
    work on the unified hierarchy without any controller)."""
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[2] == "cgroup2":
                yield parts[1]
                return
    mount = tmp_path / "cgroup2"
    mount.mkdir()
    command = ["mount", "-t", "cgroup2", "none", str(mount)]
    done = subprocess.run(command, check=False, capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount cgroup2: {done.stderr.decode().strip()}")
    try:
        yield str(mount)
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@needs_root
def test_cgroup2_device_filter_denies_the_gpus_not_given(
    gpu_files: list[str], tmp_path: Path
) -> None:
    with cgroup2_mount(tmp_path) as mount:
        base = os.path.join(mount, f"hal-test-{uuid.uuid4().hex[:8]}")
        os.mkdir(base)
        try:
            os.close(load_program(()))  # the agent's probe at start: "allow all" loads
            isolation = Isolation("cgroup2", base, BPF)
            group = isolation.create_group(7, 0, 0, denied_gpus=(1,))
            assert opened_by_job(isolation, group, [*gpu_files, "/dev/null"]) == [
                "reached",
                "denied",
                "reached",
            ]
            free = isolation.create_group(8, 0, 0)  # given every GPU: no filter
            assert opened_by_job(isolation, free, gpu_files) == ["reached", "reached"]
            # a job's steps, in subgroups, are bound by the job's filter
            step, made = isolation.create_step_group(7, 0, 1, 0)
            assert not made
            assert opened_by_job(isolation, step, gpu_files) == ["reached", "denied"]
            # a step given one of its job's two GPUs (srun --gpus=1): its own filter
            # runs with the job's
            own, _ = isolation.create_step_group(8, 0, 2, 0, step_denied=(0,))
            assert opened_by_job(isolation, own, gpu_files) == ["denied", "reached"]
            none, _ = isolation.create_step_group(7, 0, 3, 0, step_denied=(0,))
            assert opened_by_job(isolation, none, gpu_files) == ["denied", "denied"]
            for g in (step, own, none, group, free):
                isolation.collect(g, killed_by_sigkill=False)
                assert not os.path.exists(g)
        finally:
            os.rmdir(base)


def cgroup1_devices(name: str) -> Isolation:
    try:
        isolation = detect_isolation("cgroup1", name, "yes")
    except InvalidRequest as err:
        pytest.skip(f"no cgroup1 memory and devices controllers: {err}")
    assert isolation.devices.endswith(os.path.join("hal", name))
    return isolation


@needs_root
def test_cgroup1_devices_controller_denies_the_gpus_not_given(gpu_files: list[str]) -> None:
    isolation = cgroup1_devices(f"test-{uuid.uuid4().hex[:8]}")
    try:
        group = isolation.create_group(7, 0, 1 << 30, denied_gpus=(0,))
        devices = os.path.join(isolation.devices, "job_7.0")
        assert opened_by_job(isolation, group, gpu_files) == ["denied", "reached"]
        isolation.collect(group, killed_by_sigkill=False)
        assert not os.path.exists(group) and not os.path.exists(devices)

        # a step on a node without the batch script makes the job's cgroups itself
        step, made = isolation.create_step_group(9, 0, 0, 1 << 30, denied_gpus=(0, 1))
        assert made
        assert opened_by_job(isolation, step, gpu_files) == ["denied", "denied"]
        isolation.collect(step, killed_by_sigkill=False)
        assert os.path.exists(os.path.join(isolation.devices, "job_9.0"))  # the job's
        # a step given one of the job's GPUs: its own devices cgroup below the job's
        free = isolation.create_group(10, 0, 1 << 30)
        own, _ = isolation.create_step_group(10, 0, 1, 1 << 30, step_denied=(1,))
        own_devices = os.path.join(isolation.devices, "job_10.0", "step_1")
        assert opened_by_job(isolation, own, gpu_files) == ["reached", "denied"]
        assert opened_by_job(isolation, free, gpu_files) == ["reached", "reached"]
        isolation.collect(own, killed_by_sigkill=False)
        assert not os.path.exists(own) and not os.path.exists(own_devices)
        isolation.collect(free, killed_by_sigkill=False)
        isolation.release_job_group(9, 0)
        assert not os.path.exists(os.path.join(isolation.devices, "job_9.0"))
    finally:
        isolation.release()
    assert not os.path.exists(isolation.base) and not os.path.exists(isolation.devices)


def test_constrain_devices_yes_refuses_a_backend_that_cannot() -> None:
    with pytest.raises(InvalidRequest) as err:
        detect_isolation("rlimit", "n1", "yes")
    assert err.value.field == "constrain_devices"
    assert "constrain_devices=auto or no" in str(err.value)
    assert detect_isolation("rlimit", "n1", "auto") == Isolation("rlimit")
    with pytest.raises(InvalidRequest) as err:
        detect_isolation("none", "n1", "always")
    assert err.value.field == "constrain_devices"


def test_a_job_is_denied_the_minors_of_the_gpus_it_was_not_given() -> None:
    gpus = GpuInventory(count=4, minors=(4, 5, 6, 7))  # minors need not be the indices
    assert denied_minors(gpus, [1]) == (4, 6, 7)
    assert denied_minors(gpus, []) == (4, 5, 6, 7)
    assert denied_minors(gpus, [0, 1, 2, 3]) == ()
    assert denied_minors(GpuInventory(count=2), []) == ()  # --gpus N: no device files known


def test_constrain_devices_yes_refuses_gpus_without_device_files() -> None:
    """``--gpus 2`` names no device files: ``yes`` cannot be kept, ``auto`` isolates
    nothing, and a node without GPUs has nothing to isolate."""
    yes, auto = AgentConfig(constrain_devices="yes"), AgentConfig(constrain_devices="auto")
    with pytest.raises(InvalidRequest) as err:
        device_choice(yes, GpuInventory(count=2))
    assert err.value.field == "constrain_devices" and "--gpus" in str(err.value)
    assert device_choice(auto, GpuInventory(count=2)) == "no"
    assert device_choice(yes, GpuInventory()) == "no"
    assert device_choice(yes, GpuInventory(count=1, minors=(0,))) == "yes"


@needs_root
def test_a_filter_for_a_large_node_loads_and_a_refused_one_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job given one GPU of 64 (its filter's verifier log outgrew a small log buffer
    once); a program the verifier refuses is reported with the verifier's own words."""
    os.close(load_program(tuple(range(63))))
    monkeypatch.setattr(devices, "device_program", lambda minors: devices._insn(devices._EXIT))
    with pytest.raises(DeviceControlError) as err:
        load_program((1,))
    reason = str(err.value.strerror)
    assert reason.startswith("cannot load the device filter: Permission denied: "), reason
    assert "exit" in reason.split(": ", 2)[2], reason  # the verifier's trace
