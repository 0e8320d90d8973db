"""``[power]`` of ``hal.toml``: owned nodes powered down when idle and up for waiting
jobs, through an administrator's programs (Slurm's power saving, ``power_save.shtml``).

Example (slurm.conf's keys in snake_case; docs/admin/power.md)::

    [power]
    suspend_program = "/usr/local/sbin/node-off"   # SuspendProgram: run as `PROG HOSTLIST`
    resume_program = "/usr/local/sbin/node-on"     # ResumeProgram: `PROG HOSTLIST`, with
                                                   # SLURM_RESUME_FILE (JSON: jobs → nodes)
    suspend_time = 600             # SuspendTime: idle seconds before a node is powered
                                   # down; -1 or 0: never on its own (scontrol still can)
    resume_timeout = 60            # ResumeTimeout: a node not back by then goes DOWN
    suspend_timeout = 30           # SuspendTimeout: how long powering down takes
    resume_rate = 300              # ResumeRate: nodes powered up a minute (0: no limit)
    suspend_rate = 60              # SuspendRate: nodes powered down a minute (0: no limit)
    exclude_nodes = "login[1-2]"   # SuspendExcNodes: never powered down on their own
    exclude_partitions = ["interactive"]  # SuspendExcParts: their nodes neither

Both programs must be executable files on the server's host (``check_programs``, as the
server starts and at ``scontrol reconfigure``); they run as the server's user, as
Slurm's run as its SlurmUser. A mistake stops the start or the reconfigure with the key
and what to write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hal.config.priority import fail, positive_seconds, unknown_key, whole_number
from hal.core.errors import InvalidRequest

POWER_KEYS = (
    "suspend_program",
    "resume_program",
    "suspend_time",
    "resume_timeout",
    "suspend_timeout",
    "resume_rate",
    "suspend_rate",
    "exclude_nodes",
    "exclude_partitions",
)
# Slurm's defaults
RESUME_TIMEOUT_S = 60.0
SUSPEND_TIMEOUT_S = 30.0
RESUME_RATE = 300
SUSPEND_RATE = 60


@dataclass(frozen=True, slots=True)
class PowerConfig:
    """``[power]``; ``enabled`` is false without the table (no node is powered down)."""

    enabled: bool = False
    suspend_program: str = ""
    resume_program: str = ""
    suspend_time: float = -1.0  # idle seconds before powering down; <= 0: never on its own
    resume_timeout: float = RESUME_TIMEOUT_S
    suspend_timeout: float = SUSPEND_TIMEOUT_S
    resume_rate: int = RESUME_RATE  # a minute; 0: no limit
    suspend_rate: int = SUSPEND_RATE
    exclude_nodes: tuple[str, ...] = ()
    exclude_partitions: tuple[str, ...] = ()

    @property
    def automatic(self) -> bool:
        """Whether idle nodes are powered down on their own (``suspend_time`` > 0)."""
        return self.enabled and self.suspend_time > 0


def power_from_table(table: Any, source: str, partitions: tuple[str, ...]) -> PowerConfig:
    """``[power]``, checked whole; ``partitions``: the names ``[[partitions]]`` has."""
    if not isinstance(table, dict):
        raise fail(source, "power", "[power] must be a table")
    for key in table:
        if key not in POWER_KEYS:
            raise fail(source, f"power.{key}", unknown_key(key, POWER_KEYS))
    defaults = PowerConfig()
    timeouts = {
        key: positive_seconds(table[key], source, f"power.{key}") if key in table else default
        for key, default in (
            ("resume_timeout", defaults.resume_timeout),
            ("suspend_timeout", defaults.suspend_timeout),
        )
    }
    rates = {
        key: whole_number(table[key], source, f"power.{key}") if key in table else default
        for key, default in (
            ("resume_rate", defaults.resume_rate),
            ("suspend_rate", defaults.suspend_rate),
        )
    }
    nodes = _hostlist(table.get("exclude_nodes", []), source)
    parts = table.get("exclude_partitions", [])
    if isinstance(parts, str):
        parts = [p for p in parts.split(",") if p]
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise fail(
            source,
            "power.exclude_partitions",
            f'must be a list of partition names like ["interactive"] (got {parts!r})',
        )
    for name in parts:
        if name not in partitions:
            raise fail(
                source,
                "power.exclude_partitions",
                f"no partition is named {name!r}; [[partitions]] has {', '.join(partitions)}",
            )
    return PowerConfig(
        enabled=True,
        suspend_program=_program(table.get("suspend_program"), source, "suspend_program"),
        resume_program=_program(table.get("resume_program"), source, "resume_program"),
        suspend_time=_suspend_time(table.get("suspend_time", -1), source),
        resume_timeout=timeouts["resume_timeout"],
        suspend_timeout=timeouts["suspend_timeout"],
        resume_rate=rates["resume_rate"],
        suspend_rate=rates["suspend_rate"],
        exclude_nodes=nodes,
        exclude_partitions=tuple(dict.fromkeys(parts)),
    )


def _program(value: Any, source: str, key: str) -> str:
    if value is None:
        raise fail(
            source, f"power.{key}", f"[power] needs the program to run; write {_example(key)}"
        )
    if not isinstance(value, str) or not value.startswith("/"):
        raise fail(
            source, f"power.{key}", f"must be an absolute path like {_example(key)} (got {value!r})"
        )
    return value


def _example(key: str) -> str:
    return f'{key} = "/usr/local/sbin/node-{"off" if key.startswith("suspend") else "on"}"'


def check_programs(config: PowerConfig, source: str = "hal.toml") -> None:
    """Refuse ``[power]`` programs the server cannot run (``InvalidRequest`` naming the
    key): checked as the server starts and at ``scontrol reconfigure``, on the server's
    host, not when a file is only read."""
    if not config.enabled:
        return
    for key in ("suspend_program", "resume_program"):
        path = getattr(config, key)
        if not os.path.isfile(path):
            raise fail(source, f"power.{key}", f"{path} is no file; give a program that exists")
        if not os.access(path, os.X_OK):
            raise fail(
                source,
                f"power.{key}",
                f"{path} is not executable by the server's user; chmod +x {path}",
            )


def _suspend_time(value: Any, source: str) -> float:
    """Seconds > 0, or -1 / 0 for never (Slurm's SuspendTime=-1, or INFINITE)."""
    if value in ("INFINITE", "infinite"):
        return -1.0
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (value in (-1, 0) or 0 < value < float("inf")):
        raise fail(
            source,
            "power.suspend_time",
            f"must be idle seconds > 0, or -1 for never (got {value!r}); e.g. suspend_time = 600",
        )
    return float(value) if value > 0 else -1.0


def _hostlist(value: Any, source: str) -> tuple[str, ...]:
    from hal.slurm.syntax import expand_hostlist

    lists = [value] if isinstance(value, str) else value
    hint = 'write a host list like "login[1-2],gpu1" or a list of them'
    if not isinstance(lists, list) or not all(isinstance(v, str) for v in lists):
        raise fail(source, "power.exclude_nodes", f"{value!r} is not a host list; {hint}")
    names: list[str] = []
    for text in lists:
        try:
            names.extend(expand_hostlist(text, field="power.exclude_nodes"))
        except InvalidRequest:
            raise fail(
                source, "power.exclude_nodes", f"{text!r} is not a host list; {hint}"
            ) from None
    return tuple(dict.fromkeys(names))
