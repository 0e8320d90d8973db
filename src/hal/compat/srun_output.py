"""srun ``-o``/``--output`` and ``-e``/``--error``: each task's stdout and stderr to the file
its pattern names, as Slurm's slurmstepd writes them.

The patterns are sbatch's (``hal.slurm.filenames``) with the step's letters: ``%t`` the
task's rank, ``%s`` the step id, ``%J`` ``job.step``, ``%n``/``%N`` the task's node; ``%j``,
``%A``, ``%a``, ``%x`` and ``%u`` the job's. A relative path is under srun's working
directory. Without ``-e``, stderr goes where ``-o`` sends stdout; ``none`` is
``/dev/null``. Tasks whose patterns expand to the same path share one file, opened once
(truncated, or appended to with ``--open-mode=append``). submitit runs every job as
``srun --output <dir>/%j_%t_log.out --error <dir>/%j_%t_log.err ...``.

A step on the batch node (``local_step``) gives its tasks the files as their stdout and
stderr; a step on other nodes (``steps.run_step``) has its tasks' output relayed and
written here, so the files are written on srun's node (the same files on a shared
filesystem). There ``%N``/``%n`` name a task's node as block distribution places ranks
(the step's first ranks on its first node).

``-i``/``--input`` of a step on other nodes (``step_input``; ``all`` and a rank are
srun's own stdin, relayed by ``srun_input``): a file pattern is sent to the agents, which
open each task's file on its node as the task's user (Slurm's slurmstepd does the same);
a pattern naming no task, node or step is opened by srun first, so a missing file
refuses the step before it starts, with Slurm's words.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hal.core.errors import InvalidRequest
from hal.slurm.filenames import FilenameFields, expand_filename
from hal.slurm.syntax import expand_hostlist

OPEN_MODES = ("append", "truncate")
PER_TASK = re.compile(r"%[0-9]*[tnNsJ]")  # letters only a task's node can expand


@dataclass
class TaskFiles:
    output: str | None  # -o's pattern (None: srun's own stdout)
    error: str | None  # -e's (None: where -o sends stdout)
    cwd: str
    fields: FilenameFields  # the step's; each task's rank and node are filled in
    append: bool = False
    _open: dict[str, int] = field(default_factory=dict)

    def fd(
        self, rank: int, stream: str, node: str | None = None, node_index: int | None = None
    ) -> int | None:
        """The descriptor of task ``rank``'s ``stream`` file (None: srun's own), the task on
        ``node`` (default: the step's); raises ``InvalidRequest`` when the file cannot be
        opened."""
        pattern = self.error if stream == "stderr" and self.error is not None else self.output
        if pattern is None:
            return None
        if pattern.lower() == "none":
            path = os.devnull
        else:
            fields = dataclasses.replace(
                self.fields,
                task=rank,
                node=self.fields.node if node is None else node,
                node_index=self.fields.node_index if node_index is None else node_index,
            )
            path = os.path.join(self.cwd, expand_filename(pattern, fields))
        opened = self._open.get(path)
        if opened is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            if not self.append and path != os.devnull:
                flags |= os.O_TRUNC
            try:
                opened = self._open[path] = os.open(path, flags, 0o644)
            except OSError as err:
                raise InvalidRequest(
                    f"Could not open {stream} file {path}: {err.strerror}"
                ) from None
        return opened

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()


@dataclass(frozen=True, slots=True)
class OutputRequest:
    """What srun was asked: ``-o``, ``-e``, ``--open-mode`` ("" : ``SLURM_OPEN_MODE``,
    ``a`` or ``t`` as Slurm's srun reads it, else truncate)."""

    output: str | None = None
    error: str | None = None
    open_mode: str = ""

    def files(self, env: Mapping[str, str], cwd: str, step_id: int | None, node: str) -> TaskFiles:
        """The step's files."""
        mode = self.open_mode or {"a": "append", "t": "truncate"}.get(
            env.get("SLURM_OPEN_MODE", ""), ""
        )
        fields = step_fields(env, step_id, node)
        return TaskFiles(self.output, self.error, cwd, fields, append=mode == "append")


def step_fields(env: Mapping[str, str], step_id: int | None, node: str) -> FilenameFields:
    """A step's file-name letters: the job's from srun's environment (its ``SLURM_*``),
    the step's id, ``node`` and its place among the job's nodes."""
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return FilenameFields(
        job_id=int(env.get("SLURM_JOB_ID", "0") or 0),
        name=env.get("SLURM_JOB_NAME", ""),
        user=env.get("SLURM_JOB_USER", env.get("USER", "")),
        node=node,
        node_index=job_node_index(env, node) if node else 0,
        array_job_id=int(array_job) if array_job and array_job.isdigit() else None,
        array_task_id=int(array_task) if array_task and array_task.isdigit() else None,
        step=step_id,
    )


def parse_open_mode(text: str) -> str:
    """``--open-mode=append|truncate`` (a prefix will do, as Slurm reads it: ``a``)."""
    word = text.strip().lower()
    for mode in OPEN_MODES:
        if word and mode.startswith(word):
            return mode
    raise InvalidRequest(
        f"Invalid --open-mode specification: {text!r} (write append or truncate)",
        field="open_mode",
    )


def node_of_rank(nodes: list[str], tasks: list[int], rank: int) -> tuple[str, int]:
    """The node of ``rank`` in block order over ``nodes`` with ``tasks`` each, and its index
    in the list."""
    first = 0
    for index, (node, count) in enumerate(zip(nodes, tasks, strict=True)):
        if rank < first + count:
            return node, index
        first += count
    return (nodes[-1], len(nodes) - 1) if nodes else ("", 0)


def job_node_index(env: Mapping[str, str], node: str) -> int:
    """``node``'s place among the job's nodes (``%n`` is relative to the job)."""
    listed = env.get("SLURM_JOB_NODELIST", "")
    try:
        return expand_hostlist(listed, field="nodelist").index(node) if listed else 0
    except (ValueError, InvalidRequest):
        return 0


def step_input(mode: str, env: Mapping[str, str], cwd: str) -> str:
    """srun ``-i MODE`` of a step on other nodes: the pattern the agents open for each
    task ("": none; ``all`` and a rank are srun's own stdin, relayed: ``srun_input``);
    raises ``InvalidRequest`` for a file srun itself cannot open."""
    if mode.lower() in ("all", "none") or mode.isdigit():
        return ""
    if not PER_TASK.search(mode.replace("%%", "")):
        path = os.path.join(cwd, expand_filename(mode, step_fields(env, None, "")))
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as err:
            raise InvalidRequest(f"Could not open stdin file: {err.strerror}") from None
    return mode
