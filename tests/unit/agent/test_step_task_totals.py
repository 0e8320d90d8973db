"""What a step's tasks on a node used, in the node's end (``StepEnd.tasks``): the step
keeper waits for each task with ``wait4`` (its most resident memory, past what it
inherited from the keeper's fork, and its CPU seconds with its children's), and the
agent's samples while it ran (``StepShell.usage``) count too. The CPU seconds' user and
system parts (sacct's UserCPU, SystemCPU) go with the figure taken."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from test_step_tasks import node_tasks, step, until_ended

from hal.agent.procfs import Usage

MiB = 1 << 20
# 60 MiB, every page written, then about 0.3 s of CPU
HOG = (
    f'{sys.executable} -c \'import time; x = bytearray(60 << 20); x[::4096] = b"y" * (15360); '
    "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass'"
)

# about 0.4 s of user time (a loop that asks for its CPU time rarely: each ask is a
# system call), or of system time (the kernel filling a buffer from
# /dev/zero, again and again)
USER_BURN = (
    f"{sys.executable} -c 'import time; t = time.process_time()\n"
    "while time.process_time() - t < 0.4: sum(range(10000))'"
)
SYSTEM_BURN = (
    f"{sys.executable} -c 'import os, time; t = time.process_time()\n"
    'fd, buf = os.open("/dev/zero", os.O_RDONLY), bytearray(1 << 20)\n'
    "while time.process_time() - t < 0.4: os.readv(fd, [buf])'"
)


def test_each_task_ends_with_its_most_memory_and_cpu(tmp_path: Path) -> None:
    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        script = f'if [ "$SLURM_PROCID" = 2 ]; then {HOG}; fi'
        tasks.launch(step(tmp_path, script, [2, 3]))
        (end,) = (await until_ended(tasks)).ends
        used = {t.rank: t for t in end.tasks}
        assert sorted(used) == [2, 3], end
        assert used[2].max_rss_bytes >= 60 * MiB, used
        assert used[2].cpu_seconds >= 0.25, used
        assert used[3].max_rss_bytes < 60 * MiB and used[3].cpu_seconds < 0.25, used
        runner.cancel()

    asyncio.run(scenario())


def test_a_sample_above_what_wait4_saw_is_kept(tmp_path: Path) -> None:
    """The tree of a task is summed by the agent's samples (several processes), where
    ``wait4`` sees one process's most: the larger one is the task's."""

    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        tasks.launch(step(tmp_path, "sleep 0.5", [0]))
        for _ in range(200):
            if targets := tasks.shell.usage_targets():
                break
            await asyncio.sleep(0.01)
        (target,) = targets
        tasks.shell.usage([(target, Usage(500 * MiB, 0.125, 0.0))])
        (end,) = (await until_ended(tasks)).ends
        (used,) = end.tasks
        assert (used.rank, used.max_rss_bytes) == (0, 500 * MiB), used
        assert used.cpu_seconds >= 0.125, used
        # the sample's user and system parts, with its CPU seconds
        assert (used.user_cpu_seconds, used.system_cpu_seconds) == (0.125, 0.0), used
        runner.cancel()

    asyncio.run(scenario())


def test_each_task_ends_with_its_user_and_system_time_apart(tmp_path: Path) -> None:
    """Rank 2 burns user time, rank 3 system time: each task's end says which."""

    async def scenario() -> None:
        tasks = node_tasks(tmp_path)
        runner = asyncio.ensure_future(tasks.run())
        script = f'if [ "$SLURM_PROCID" = 2 ]; then {USER_BURN}; else {SYSTEM_BURN}; fi'
        tasks.launch(step(tmp_path, script, [2, 3]))
        (end,) = (await until_ended(tasks)).ends
        used = {t.rank: t for t in end.tasks}
        assert sorted(used) == [2, 3], end
        parts = {r: (t.user_cpu_seconds, t.system_cpu_seconds) for r, t in used.items()}
        for rank, (user, system) in parts.items():
            assert user is not None and system is not None, used
            assert user + system == used[rank].cpu_seconds, used
        (user2, system2), (user3, system3) = parts[2], parts[3]
        assert user2 is not None and system2 is not None and user3 is not None
        assert system3 is not None
        assert user2 >= 0.3 > system2, used  # the loop: user time
        assert system3 >= 0.2 > user3, used  # the reads: system time
        runner.cancel()

    asyncio.run(scenario())
