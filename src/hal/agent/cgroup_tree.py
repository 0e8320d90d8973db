"""The agent's folder in a cgroup hierarchy, ``<mount>/hal/<agent>`` (``hal.agent.isolation``
and ``hal.agent.cpusets``)."""

from __future__ import annotations

import os

from hal.host.cgroup_memory import write


def delegate(mount: str, name: str, controller: str) -> bool:
    """Enable the cgroup2 ``controller`` from the ``mount``'s root down to the agent's
    folder ``hal/<name>`` (made here) and for its children, as each level must; whether
    the host has it and let it be."""
    try:
        if controller not in read(mount, "cgroup.controllers").split():
            return False
        level = mount
        for part in ("hal", name):
            write(level, "cgroup.subtree_control", f"+{controller}")
            level = os.path.join(level, part)
            os.makedirs(level, exist_ok=True)
        write(level, "cgroup.subtree_control", f"+{controller}")
    except OSError:
        return False
    return True


def read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as f:
        return f.read()
