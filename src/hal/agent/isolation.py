"""Memory isolation backends, chosen by what the host offers.

==========  ==============================================================================
cgroup2     unified hierarchy with the memory controller: ``<mount>/hal/<agent>/job_<id>.<n>``,
            ``memory.max`` (+ ``memory.swap.max=0``), the batch script in its leaf
            ``batch``; OOM kills are counted in each leaf's ``memory.events``.
cgroup1     the v1 memory controller: ``/sys/fs/cgroup/memory/hal/<agent>/job_<id>.<n>``,
            ``memory.limit_in_bytes`` (+ ``memory.memsw.limit_in_bytes`` when swap
            accounting is on); OOM kills counted in ``memory.oom_control``.
rlimit      no cgroups: the step supervisor samples the job tree's resident memory and
            kills it over the limit (Slurm's OverMemoryKill). ``RLIMIT_AS`` alone would
            only make ``malloc`` fail, and a job failing with its own "MemoryError" cannot
            be told from any other failure, so it is set only as a loose backstop.
none        nothing is enforced.
==========  ==============================================================================

GPU device isolation (``hal.agent.devices``) rides on the cgroup backends: ``devices`` is
``"bpf"`` (cgroup2: a device filter attached to the job's cgroup), the folder of the job
cgroups in the cgroup1 ``devices`` hierarchy, or ``""`` (off). So does the CPU fence
(``hal.agent.cpusets``): ``cores`` is ``"cgroup2"`` (the job's own cgroup), the folder of
the job cgroups in the cgroup1 ``cpuset`` hierarchy, or ``""`` (off).

On a hybrid host (cgroup1 controllers, and the cgroup2 hierarchy mounted beside them
without any, as ``/sys/fs/cgroup/unified``) a cgroup1 agent also places each job in
``<unified>/hal/<agent>/job_<id>.<n>`` (``accounting``): a cgroup2 cgroup without
controllers still counts its CPU time (``cpu.stat``) and its pressure stalls
(``cpu.pressure``, ``memory.pressure``, ``io.pressure``), which the job's profile reads
(``hal.agent.profile``). Nothing is limited there.

A job step's tasks run in ``job_<id>.<n>/step_<m>`` (``create_step_group``), inside the
job's cgroup and its limit, made for them on a node where the job has no batch script.

(``<agent>`` is ``<node>.<hash of the state directory>``: several agents may share a host
— test clusters, virtual nodes — and must never see each other's job cgroups. ``<n>`` is
the attempt: a requeued job's new attempt must not share a cgroup with the old one's
cleanup.) Every job gets its own cgroup, even without a memory limit, so that
the supervisor can find and kill every process the job left behind, including ones that
left its process group. The backend object is created once in the agent and used after
``fork`` in the step supervisor (``create_group``, ``collect``) and the job process
(``enter``), so its methods make plain system calls only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import time
from dataclasses import dataclass

from hal.agent import cpusets
from hal.agent.cgroup_tree import delegate, read
from hal.agent.cpusets import CPUSET_V2
from hal.agent.devices import DeviceControlError, attach_device_filter, deny_lines, load_program
from hal.core.errors import InvalidRequest
from hal.core.resources import GiB
from hal.host.cgroup_memory import fence_cpus, limit_memory, write

CHOICES = ("auto", "cgroup2", "cgroup1", "rlimit", "none")
DEVICE_CHOICES = ("auto", "yes", "no")
BPF = "bpf"
BATCH = "batch"  # the batch script's leaf in the job's cgroup2 cgroup
RLIMIT_AS_FACTOR = 4  # backstop: address space is typically 1.5-3x resident memory
RMDIR_TRIES = 50  # a killed process takes a moment to leave its cgroup


@dataclass(frozen=True, slots=True)
class MemoryOutcome:
    oom_kills: int = 0  # processes the kernel killed for the cgroup's memory limit
    peak_bytes: int = 0

    @property
    def oom(self) -> bool:
        return self.oom_kills > 0


@dataclass(frozen=True, slots=True)
class Isolation:
    kind: str  # cgroup2, cgroup1, rlimit, none
    base: str = ""  # the node's cgroup directory (cgroup backends)
    devices: str = ""  # GPU device isolation: "bpf", cgroup1's devices folder, or "" (off)
    cores: str = ""  # the CPU fence: "cgroup2", cgroup1's cpuset folder, or "" (off)
    # a cgroup1 agent's folder in the cgroup2 hierarchy of a hybrid host, for accounting
    # only (CPU time, pressure stalls); "" elsewhere
    accounting: str = ""

    @property
    def watchdog(self) -> bool:
        """Whether the step supervisor must sample memory itself."""
        return self.kind == "rlimit"

    # -- in the step supervisor -----------------------------------------------------------

    def group_path(self, job_id: int, attempt: int) -> str:
        """Where the job's cgroup is ("" without cgroups)."""
        return os.path.join(self.base, f"job_{job_id}.{attempt}") if self.base else ""

    def create_group(
        self,
        job_id: int,
        attempt: int,
        memory_bytes: int,
        denied_gpus: tuple[int, ...] = (),
        owner: tuple[int, int] | None = None,
        cpus: tuple[int, ...] = (),
    ) -> str:
        """Create the job's cgroup with its limit and denied GPU minors; returns the
        batch script's cgroup ("" without cgroups): the job's under cgroup1, its leaf
        ``job_<id>.<n>/batch`` under cgroup2 (which keeps processes out of a cgroup whose
        children have controllers), so that the steps beside it count their own OOM
        kills, as Slurm's ``job_N/step_batch``.

        ``cpus``: the host CPUs the job is bound to here, its fence where ``cores``.

        ``owner`` (the job's uid and gid) is given the job's cgroup folder and its
        ``cgroup.procs``, as systemd delegates a cgroup: srun, running as the job's
        user, makes a step's cgroup there for the tasks it runs itself
        (``hal.compat.local_step``), fenced to the step's CPUs where the job is (on
        cgroup1 in the job's cpuset cgroup, given to the user the same way). Its limits
        and fence stay root's, and every subgroup is bounded by them."""
        path = self.group_path(job_id, attempt)
        if not path:
            return ""
        _make_group(path)
        self._limit(path, memory_bytes)
        self._constrain(path, denied_gpus)
        fenced = self._fence(path, cpus)
        if accounting := self.accounting_group(path):
            _make_group(accounting)
        if owner is not None:
            files = ("cgroup.procs", "tasks") if self.kind == "cgroup1" else ("cgroup.procs",)
            for folder in {path, fenced or path}:  # (cgroup1's cpuset cgroup besides)
                for name in ("", *files):
                    os.chown(os.path.join(folder, name), *owner)
        if self.kind != "cgroup2":
            return path
        _write_optional(path, "cgroup.subtree_control", "+memory")  # the leaves' own events
        if fenced:  # srun's steps' own cpuset.cpus (where it cannot, the job's holds)
            _write_optional(path, "cgroup.subtree_control", "+cpuset")
        leaf = os.path.join(path, BATCH)
        _make_group(leaf)
        return leaf

    def _constrain(self, path: str, denied_gpus: tuple[int, ...]) -> None:
        """Deny the job or step (cgroup ``path``) the device files of ``denied_gpus``
        (minors). A step's filter runs with its job's (``BPF_F_ALLOW_MULTI``), and a
        cgroup1 devices cgroup holds no device its parent is denied."""
        if self.devices == BPF:
            if denied_gpus:
                attach_device_filter(path, denied_gpus)
        elif self.devices:
            devices = self._device_group(path)
            _make_group(devices)
            for line in deny_lines(denied_gpus):
                write(devices, "devices.deny", line)

    def _fence(self, path: str, cpus: tuple[int, ...]) -> str:
        """Confine the job or step (cgroup ``path``) to the host CPUs ``cpus``, where the
        agent fences jobs and this one is bound (``hal.agent.cpusets``); returns the
        cgroup that holds the fence (``path`` itself on cgroup2), or ""."""
        if not self.cores or not cpus:
            return ""
        if self.cores == CPUSET_V2:
            fence_cpus(path, cpus, v1=False)
            return path
        group = self._cpuset_group(path)
        _make_group(group)
        fence_cpus(group, cpus, v1=True)
        return group

    def _device_group(self, group: str) -> str:
        """The cgroup1 ``devices`` cgroup of the job or step whose cgroup is ``group``
        (the same path below the devices folder; "" where there is none)."""
        return _mirror(self.devices, self.base, group)

    def _cpuset_group(self, group: str) -> str:
        """The cgroup1 ``cpuset`` cgroup of the job or step whose cgroup is ``group``
        (the same path below the cpuset folder; "" where there is none)."""
        return _mirror(self.cores, self.base, group)

    def accounting_group(self, group: str) -> str:
        """The cgroup2 accounting cgroup of the job or step whose cgroup1 cgroup is
        ``group`` on a hybrid host (the same path below ``accounting``; "" elsewhere)."""
        return _mirror(self.accounting, self.base, group)

    def _mirrors(self, group: str) -> list[str]:
        """The job's or step's cgroup1 devices and cpuset cgroups and its accounting
        cgroup that exist."""
        found = [self._device_group(group), self._cpuset_group(group)]
        found.append(self.accounting_group(group))
        return [m for m in found if m and os.path.isdir(m)]

    def _limit(self, path: str, memory_bytes: int) -> None:
        limit_memory(path, self.kind, memory_bytes)

    # -- job steps' tasks (in the agent: ``hal.agent.steps``) ------------------------------

    def create_step_group(
        self,
        job_id: int,
        attempt: int,
        step_id: int,
        memory_bytes: int,
        denied_gpus: tuple[int, ...] = (),
        step_denied: tuple[int, ...] = (),
        step_memory_bytes: int = 0,
        cpus: tuple[int, ...] = (),
        step_cpus: tuple[int, ...] = (),
    ) -> tuple[str, bool]:
        """The cgroup of one job step's tasks on this node, ``job_<id>.<n>/step_<m>``, as
        Slurm's ``job_N/step_M``: inside the job's, so the job's memory limit on this
        node holds for its batch script and all its steps together. On a node without
        the batch script the job's cgroup is made here, with ``memory_bytes`` (the job's
        memory on this node) and ``denied_gpus``. ``step_denied``: the GPU minors the
        step may not open besides (a step given fewer GPUs than its job, srun
        ``--gpus``); the job's denials hold for it whatever it is given.
        ``step_memory_bytes``: the step's own memory limit (srun ``--mem``; 0: the
        job's alone), as Slurm's task/cgroup limits each step to its memory. ``cpus``,
        ``step_cpus``: the job's bound CPUs here and the step's among them, the job's
        and the step's fences where ``cores`` (as Slurm's ConstrainCores). Returns the
        step's path ("" without cgroups) and whether the job's cgroup was made here
        (``release_job_group`` then removes it)."""
        job = self.group_path(job_id, attempt)
        if not job:
            return "", False
        made = False
        try:
            os.mkdir(job)
            made = True
        except FileExistsError:
            pass  # the batch script's (or another step's): its limit is set
        if made:
            self._limit(job, memory_bytes)
            self._constrain(job, denied_gpus)
            self._fence(job, cpus)
        if self.kind == "cgroup2":
            # the steps' own memory.events (which step hit the limit); the batch script,
            # where there is one, has its own leaf beside them (``create_group``)
            _write_optional(job, "cgroup.subtree_control", "+memory")
            if self.cores and step_cpus:  # the steps' own cpuset.cpus
                write(job, "cgroup.subtree_control", "+cpuset")
        path = os.path.join(job, f"step_{step_id}")
        try:
            os.mkdir(path)
        except FileExistsError:
            _kill_procs(path)  # an earlier agent's, killed before its cleanup
        if self.devices and self.devices != BPF:  # its tasks join a devices cgroup too
            _make_group(self._device_group(path))
        if self.accounting:  # (in the job's: made with the batch script's, or here)
            os.makedirs(self.accounting_group(job), exist_ok=True)
            _make_group(self.accounting_group(path))
        self._constrain(path, step_denied)
        self._limit(path, step_memory_bytes)
        self._fence(path, step_cpus)
        return path, made

    def remove_step_group(self, path: str) -> None:
        """Kill what is left in a step's cgroup and remove it (and its cgroup1 devices
        cgroup)."""
        remove_group(path)
        for mirror in self._mirrors(path):
            remove_group(mirror)

    def release_job_group(self, job_id: int, attempt: int) -> None:
        """Remove the job's cgroup made for its steps, if nothing is in it any more (a
        batch script that has started in it since keeps it)."""
        group = self.group_path(job_id, attempt)
        with contextlib.suppress(OSError):
            os.rmdir(group)
            for mirror in self._mirrors(group):
                os.rmdir(mirror)

    def remove_job(self, job_id: int, attempt: int) -> None:
        """Kill what is left of the job in its cgroups and remove them."""
        if group := self.group_path(job_id, attempt):
            self._remove_job(group)

    def _remove_job(self, group: str) -> None:
        """Remove the job's cgroup ``group``, its steps' and its cgroup1 devices and
        cpuset ones."""
        mirrors = self._mirrors(group)
        remove_group(group)
        for mirror in mirrors:
            remove_group(mirror)

    def collect(self, group: str, killed_by_sigkill: bool) -> MemoryOutcome:
        """After the batch shell exited: read the OOM counter and peak, kill stragglers,
        remove the cgroup."""
        if not group:
            return MemoryOutcome()
        if self.kind == "cgroup2":
            kills = _read_keyed(group, "memory.events").get("oom_kill", 0)
            peak = _read_int(group, "memory.peak")
        else:
            control = _read_keyed(group, "memory.oom_control")
            if "oom_kill" in control:  # Linux >= 4.13
                kills = control["oom_kill"]
            else:
                kills = int(killed_by_sigkill and _read_int(group, "memory.failcnt") > 0)
            peak = _read_int(group, "memory.max_usage_in_bytes")
        job, rest = _job_part(self.base, group)
        if rest in ("", BATCH):  # the batch script's: the whole job's cgroups go with it
            self._remove_job(os.path.join(self.base, job))
        else:  # a step's
            self.remove_step_group(group)
        return MemoryOutcome(oom_kills=kills, peak_bytes=peak)

    # -- in the job process, before exec (still root) ---------------------------------------

    def enter(self, group: str, memory_bytes: int, *, gpus: bool) -> None:
        if group:
            write(group, "cgroup.procs", os.getpid())
            if devices := self._device_group(group):
                write(devices, "cgroup.procs", os.getpid())
            cpuset = self._cpuset_group(group)  # (none for a job not bound)
            if cpuset and os.path.isdir(cpuset):
                write(cpuset, "cgroup.procs", os.getpid())
            accounting = self.accounting_group(group)
            if accounting:  # (best effort: it only counts)
                _write_optional(accounting, "cgroup.procs", os.getpid())
        elif self.kind == "rlimit" and memory_bytes > 0 and not gpus:
            # GPU runtimes reserve terabytes of address space; RLIMIT_AS would break them.
            cap = max(memory_bytes * RLIMIT_AS_FACTOR, memory_bytes + GiB)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def release(self) -> None:
        """Remove the node's cgroup directory if no job uses it (at agent stop)."""
        mirrors = ("" if self.devices == BPF else self.devices, self.cores, self.accounting)
        for folder in (self.base, *mirrors):
            if folder and folder != CPUSET_V2:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)


def _make_group(path: str) -> None:
    """Make the cgroup ``path``. One left by a supervisor killed before its cleanup is
    emptied and reused (its own members only: a step's tasks in a subgroup, started just
    before the batch script of an allocation, are the job's)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        _kill_procs(path)


def _mirror(folder: str, base: str, group: str) -> str:
    """``group``'s path below the cgroup1 hierarchy folder ``folder`` ("" where there is
    none: off, or cgroup2's)."""
    if not folder or folder in (BPF, CPUSET_V2) or not group:
        return ""
    return os.path.join(folder, os.path.relpath(group, base))


def _job_part(base: str, group: str) -> tuple[str, str]:
    """``job_<id>.<n>`` and the rest of ``group``'s path below it ("" for the job's)."""
    job, _, rest = os.path.relpath(group, base).partition(os.sep)
    return job, rest


def remove_group(group: str) -> None:
    """Kill whatever is left in ``group`` and its subgroups (a job's steps) and remove
    them (best effort, bounded)."""
    with contextlib.suppress(OSError), os.scandir(group) as entries:
        for sub in [e.path for e in entries if e.is_dir(follow_symlinks=False)]:
            remove_group(sub)
    for _ in range(RMDIR_TRIES):
        _kill_members(group)
        try:
            os.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError as err:
            if err.errno != errno.EBUSY:
                return
        time.sleep(0.02)


def agent_cgroup_name(node: str, state_dir: str) -> str:
    """The agent's folder under ``hal/``: one per (node, state directory)."""
    import hashlib  # the agent's alone: the fork server, which imports this module, hashes nothing

    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:8]
    return f"{node}.{digest}"


def detect_isolation(choice: str, name: str, devices: str = "no", cores: str = "no") -> Isolation:
    """The best backend for ``choice`` (``auto`` tries cgroup2, cgroup1, rlimit), with
    GPU device isolation for ``devices`` and the CPU fence for ``cores`` (``auto``:
    where the backend allows it).

    An explicit choice the host cannot honour is an operator error and fails the agent's
    start, rather than quietly running jobs without the promised limits.
    """
    if choice not in CHOICES:
        raise InvalidRequest(
            f"unknown isolation {choice!r}; choose one of {', '.join(CHOICES)}",
            field="isolation",
        )
    for option, value in (("constrain_devices", devices), ("constrain_cores", cores)):
        if value not in DEVICE_CHOICES:
            raise InvalidRequest(
                f"unknown {option} {value!r}; choose one of {', '.join(DEVICE_CHOICES)}",
                field=option,
            )
    found = Isolation(choice) if choice in ("rlimit", "none") else _cgroup_backend(choice, name)
    wanted = devices != "no" and found.base
    control = _prepare_devices(found.kind, name) if wanted else ""
    if devices == "yes" and not control:
        raise InvalidRequest(
            f"constrain_devices=yes needs a cgroup backend that can deny device files "
            f"(cgroup1 with the devices controller, or cgroup2 with bpf and root); this agent "
            f"has isolation {found.kind}. Use constrain_devices=auto or no",
            field="constrain_devices",
        )
    mount = _mount_of(found.kind, "cpuset") if cores != "no" and found.base else ""
    fence = cpusets.prepare(found.kind, mount, name)
    if cores == "yes" and not fence:
        raise InvalidRequest(
            f"constrain_cores=yes needs a cgroup backend with the cpuset controller (cgroup1's "
            f"cpuset hierarchy, or cgroup2 with cpuset in cgroup.controllers); this agent has "
            f"isolation {found.kind}. Use constrain_cores=auto or no",
            field="constrain_cores",
        )
    accounting = _prepare_accounting(name) if found.kind == "cgroup1" else ""
    return Isolation(found.kind, found.base, control, fence, accounting)


def _cgroup_backend(choice: str, name: str) -> Isolation:
    for kind in ("cgroup2", "cgroup1") if choice == "auto" else (choice,):
        base = _prepare_cgroup(kind, name)
        if base:
            return Isolation(kind, base)
    if choice != "auto":
        raise InvalidRequest(
            f"isolation {choice} is not available on this host (no writable {choice} memory "
            "controller); use isolation=auto",
            field="isolation",
        )
    return Isolation("rlimit")


def _prepare_accounting(name: str) -> str:
    """The agent's folder ``hal/<name>`` (made here) in the cgroup2 hierarchy mounted
    beside cgroup1 on a hybrid host, where it has pressure-stall files; "" where there
    is none, it has no pressure figures (PSI off) or it is not ours to write."""
    mount = _mount_of("cgroup2", "")
    if not mount or not os.path.exists(os.path.join(mount, "cpu.pressure")):
        return ""
    base = os.path.join(mount, "hal", name)
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        return ""
    return base


def _prepare_devices(kind: str, name: str) -> str:
    """``"bpf"`` where the kernel loads a device filter (cgroup2), the agent's folder in
    the cgroup1 ``devices`` hierarchy, or ``""`` where neither works."""
    if kind == "cgroup2":
        try:
            os.close(load_program(()))
        except DeviceControlError:
            return ""
        return BPF
    mount = _mount_of("cgroup1", "devices")
    if not mount:
        return ""
    base = os.path.join(mount, "hal", name)
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        return ""
    return base if os.path.exists(os.path.join(base, "devices.deny")) else ""


def _prepare_cgroup(kind: str, name: str) -> str:
    mount = _mount_of(kind, "memory")
    if not mount:
        return ""
    base = os.path.join(mount, "hal", name)
    if kind == "cgroup2":  # each level must delegate the memory controller to its children
        return base if delegate(mount, name, "memory") else ""
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        return ""
    return base if os.path.exists(os.path.join(base, "memory.limit_in_bytes")) else ""


def _mount_of(kind: str, controller: str) -> str:
    """Where the hierarchy for ``kind`` is mounted (for cgroup1, the one of
    ``controller``), from ``/proc/self/mounts``."""
    try:
        with open("/proc/self/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        mountpoint, fstype, options = parts[1], parts[2], parts[3].split(",")
        if kind == "cgroup2" and fstype == "cgroup2":
            return mountpoint
        if kind == "cgroup1" and fstype == "cgroup" and controller in options:
            return mountpoint
    return ""


def _kill_members(group: str) -> None:
    with contextlib.suppress(OSError):
        if os.path.exists(os.path.join(group, "cgroup.kill")):  # cgroup2, Linux >= 5.14
            write(group, "cgroup.kill", 1)  # (its subgroups' too)
            return
    _kill_procs(group)


def _kill_procs(group: str) -> None:
    """SIGKILL the processes in ``group`` itself, not those of its subgroups."""
    signal_procs(group, signal.SIGKILL)


def signal_procs(group: str, signum: int) -> int:
    """Send ``signum`` to the processes in ``group`` itself (not its subgroups'); how
    many there were (0 for no such cgroup)."""
    try:
        pids = read(group, "cgroup.procs").split()
    except OSError:
        return 0
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(int(pid), signum)
    return len(pids)


def _write_optional(directory: str, name: str, value: object) -> None:
    with contextlib.suppress(OSError):
        write(directory, name, value)


def _read_int(directory: str, name: str) -> int:
    try:
        return int(read(directory, name).split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _read_keyed(directory: str, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        text = read(directory, name)
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[key] = int(value)
    return out
