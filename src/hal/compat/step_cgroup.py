"""The cgroup of a step that srun runs on the batch node itself (``local_step``).

A root agent gives the job's cgroup folder to the job's user (``Isolation.create_group``,
``owner``), as systemd delegates a cgroup. srun, which runs as that user, makes
``job_<id>.<n>/step_<m>`` there, limited to the step's memory (``srun --mem``...), and
its tasks join it before ``exec``: the step's OOM kills are then counted apart from the
batch script's, as under Slurm, whose steps each have their own cgroup and limit. The
job's memory limit, on the folder above, still bounds them.
Where srun cannot make one (an agent that is not root, the ``rlimit`` backend, an agent
from before this), the tasks stay in srun's own cgroup and the step's kills are what that
cgroup's counter gained while they ran.

Where the agent fences the job to its CPUs (``hal agent --constrain-cores``), srun fences
a step given CPUs of its own (``--exact``) to them, as Slurm's ``step_M`` cpuset: in the
step's cgroup on cgroup2, in ``job_<id>.<n>/step_<m>`` of the cpuset hierarchy, which the
agent gave the user too, on cgroup1.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from hal.host.cgroup_memory import fence_cpus, limit_memory


@dataclass(frozen=True, slots=True)
class JobCgroup:
    own: str  # srun's own cgroup folder ("" outside a job's)
    job: str  # the job's cgroup folder, ``job_<id>.<n>``
    kind: str  # "cgroup2" or "cgroup1" (its memory hierarchy)
    cpuset: str = ""  # cgroup1: the job's folder in the cpuset hierarchy ("": none)

    def oom_kills(self, folder: str) -> int:
        """The kernel's OOM kill count of ``folder`` (0 where unknown)."""
        name = "memory.events" if self.kind == "cgroup2" else "memory.oom_control"
        return _keyed(os.path.join(folder, name)).get("oom_kill", 0) if folder else 0

    def make_step(self, step_id: int, memory_bytes: int = 0) -> str:
        """``job_<id>.<n>/step_<m>``, made by srun, limited to the step's
        ``memory_bytes`` (0: the job's limit alone), as Slurm's task/cgroup limits each
        step to its memory; "" where it may not make it."""
        if not self.job:
            return ""
        path = os.path.join(self.job, f"step_{step_id}")
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError:
            return ""
        if memory_bytes > 0:  # (where srun may not write it, the job's limit holds)
            with contextlib.suppress(OSError):
                limit_memory(path, self.kind, memory_bytes)
        return path

    def fence_step(self, step_id: int, step: str, cpus: tuple[int, ...]) -> str:
        """Fence the step (its cgroup ``step``, from ``make_step``) to the host ``cpus``
        where the job is fenced; returns the cgroup1 cpuset cgroup its tasks must join
        besides ("" on cgroup2, where ``step`` holds the fence, or where there is none:
        the job's fence holds)."""
        if not cpus:
            return ""
        if self.kind == "cgroup2":
            if step:
                with contextlib.suppress(OSError):  # (no cpuset there: the job is unfenced)
                    fence_cpus(step, cpus, v1=False)
            return ""
        if not self.cpuset:
            return ""
        path = os.path.join(self.cpuset, f"step_{step_id}")
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
            fence_cpus(path, cpus, v1=True)
        except OSError:
            remove(path)
            return ""
        return path


def job_cgroup(job_id: int) -> JobCgroup:
    """srun's own cgroup and the job's, from ``/proc/self/cgroup``."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return JobCgroup("", "", "")
    found: dict[str, tuple[str, str]] = {}  # controllers → (srun's own, the job's)
    for line in lines:
        _, controllers, path = line.split(":", 2)
        parts = path.split("/")
        mine = [i for i, part in enumerate(parts) if part.startswith(f"job_{job_id}.")]
        if mine:
            found[controllers] = (path, "/".join(parts[: mine[0] + 1]))
    memory = next((v for k, v in found.items() if "memory" in k.split(",")), None)
    if memory is None:
        if "" in found:
            own, job = found[""]
            return JobCgroup(f"/sys/fs/cgroup{own}", f"/sys/fs/cgroup{job}", "cgroup2")
        return JobCgroup("", "", "")
    # (a cgroup1 job on a hybrid host is in a cgroup2 cgroup of its name too: its
    # accounting cgroup, which limits nothing; its memory cgroup is the job's)
    cpuset = next((v[1] for k, v in found.items() if "cpuset" in k.split(",")), "")
    root = "/sys/fs/cgroup/memory"
    return JobCgroup(
        f"{root}{memory[0]}",
        f"{root}{memory[1]}",
        "cgroup1",
        f"/sys/fs/cgroup/cpuset{cpuset}" if cpuset else "",
    )


def join(folder: str) -> None:
    """Move the calling process into ``folder`` (a task, between ``fork`` and ``exec``);
    where it cannot, the task stays in srun's cgroup."""
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def remove(folder: str) -> None:
    """Remove the step's cgroup once its tasks have ended (one a task's orphan still
    holds goes with the job's)."""
    if folder:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _keyed(path: str) -> dict[str, int]:
    try:
        with open(path) as f:
            pairs = (line.split() for line in f)
            return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
    except OSError:
        return {}
