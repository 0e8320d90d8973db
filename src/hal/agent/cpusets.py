"""Jobs fenced to their CPUs by the cpuset controller, as Slurm's ``ConstrainCores=yes``.

A bound job (``hal.agent.cpus``) starts with its affinity set to its CPUs, but any of its
processes may widen it again (``taskset``, ``sched_setaffinity``). A cpuset cgroup is a
fence: the kernel intersects every affinity its processes ask for with its
``cpuset.cpus``. The job's cgroup gets the job's CPUs on the node, and each step's, in
it, the step's own (an ``--exact`` step's), as Slurm's task/cgroup confines
``job_N/step_M``.

==========  ==============================================================================
cgroup2     the ``cpuset`` controller enabled down to the agent's folder (as ``memory``
            is): the job's cgroup carries ``cpuset.cpus`` itself (``CPUSET_V2``).
cgroup1     the cpuset hierarchy has a folder of its own, ``<mount>/hal/<agent>``, in which
            each job and step gets a cgroup mirroring its memory one (as the devices
            hierarchy's), with ``cpuset.mems`` copied from its parent (a cgroup1 cpuset
            with no memory nodes takes no process) and ``cpuset.cpus``.
==========  ==============================================================================

(The functions here make plain system calls: ``Isolation`` calls them in the step
supervisor and the keeper, after ``fork``.)
"""

from __future__ import annotations

import os

from hal.agent.cgroup_tree import delegate, read
from hal.host.cgroup_memory import write

CPUSET_V2 = "cgroup2"  # ``Isolation.cores`` when the job's own cgroup2 cgroup is the fence


def prepare(kind: str, mount: str, name: str) -> str:
    """``CPUSET_V2`` or the agent's cgroup1 cpuset folder where the host lets jobs be
    fenced (``mount``: the cgroup2 mount, or cgroup1's cpuset one), else ``""``."""
    if not mount:
        return ""
    base = os.path.join(mount, "hal", name)
    if kind == "cgroup2":
        return CPUSET_V2 if delegate(mount, name, "cpuset") else ""
    try:
        level = mount
        for part in ("hal", name):
            level = os.path.join(level, part)
            os.makedirs(level, exist_ok=True)
            inherit(level)
        return base if read(base, "cpuset.cpus").strip() else ""
    except OSError:
        return ""


def inherit(group: str) -> None:
    """A new cgroup1 cpuset's ``cpuset.mems`` and ``cpuset.cpus``, empty at first, taken
    from its parent's where unset."""
    parent = os.path.dirname(group)
    for name in ("cpuset.mems", "cpuset.cpus"):
        if not read(group, name).strip():
            write(group, name, read(parent, name).strip())
