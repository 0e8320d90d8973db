"""Real batch jobs with known behaviour on a real agent: the profiles its syncs carry
(``JobUsage.profile``) put each one in the class it is. A CPU spinner is ``cpu``, a
writer that syncs each write to disk is ``io``, a sleeper is ``light``, and a process
that allocates and touches 300 MB shows them resident. On a host with cgroup2 pressure
files for the job (cgroup2, or a hybrid host's accounting cgroup) the stall shares are
there; elsewhere they are None."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from conftest import PYTHON, FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.agent.isolation import agent_cgroup_name, detect_isolation
from hal.core.profiles import CPU, IO, LIGHT, MEMORY, classify
from hal.state.profiles import job_profile
from hal.wire.agent import Cancel, JobUsage
from hal.wire.jobs import JobProfileSample

MB = 1_000_000
SPINNER = f"#!/bin/sh\nexec {PYTHON} -c 'while True: pass'\n"
# 1 MiB written and synced to disk at a time, over a 16 MiB file
WRITER = f"""#!/bin/sh
exec {PYTHON} -c '
import os
fd = os.open("written.bin", os.O_WRONLY | os.O_CREAT, 0o600)
block = os.urandom(1 << 20)
i = 0
while True:
    os.pwrite(fd, block, (i % 16) << 20)
    os.fsync(fd)
    i += 1
'
"""
SLEEPER = "#!/bin/sh\nexec sleep 600\n"
ALLOCATOR = f"""#!/bin/sh
exec {PYTHON} -c '
import time
held = bytearray(300 << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
open("touched", "w").close()
time.sleep(600)
'
"""
GIVEN_MEMORY = 1 << 30  # each job's allocation here (the yardstick of its memory)


def profiles(channel: FakeChannel, job_id: int) -> list[JobProfileSample]:
    return [u.profile for u in channel.usage if u.job_id == job_id and u.profile is not None]


def class_of(sample: JobProfileSample) -> str:
    return classify(job_profile(sample, cpus=1, memory_bytes=GIVEN_MEMORY))


def test_known_processes_are_classed_by_what_they_do(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
) -> None:
    config = dataclasses.replace(agent_config, memory_bytes=4 * GIVEN_MEMORY)
    isolation = detect_isolation("auto", agent_cgroup_name(config.node, str(config.state_dir)))
    stalls_known = isolation.kind == "cgroup2" or bool(isolation.accounting)

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            jobs = {1: SPINNER, 2: WRITER, 3: SLEEPER, 4: ALLOCATOR}
            for job_id, script in jobs.items():
                channel.push(make_launch(job_id, script, workdir, memory_bytes=GIVEN_MEMORY))
            for job_id in jobs:
                await agent.started(job_id)

            def classed(job_id: int, wanted: str) -> bool:
                return any(class_of(p) == wanted for p in profiles(channel, job_id))

            # (a loaded test host may starve a job for a window: any window will do)
            await wait_for(lambda: classed(1, CPU), "the spinner classed cpu")
            await wait_for(lambda: classed(2, IO), "the syncing writer classed io")
            await wait_for((workdir / "touched").exists, "300 MB touched")
            await wait_for(
                lambda: any(p.rss_bytes >= 300 << 20 for p in profiles(channel, 4)),
                "the allocator's 300 MB resident",
            )
            await wait_for(lambda: len(profiles(channel, 3)) >= 3, "three sleeper profiles")
            for job_id in jobs:
                channel.push(Cancel(job_id=job_id, kill_wait_seconds=1))
            for job_id in jobs:
                await agent.finished(job_id)

        spinning = [p for p in profiles(channel, 1) if class_of(p) == CPU]
        # busy, or runnable and waiting for a CPU on a crowded host
        assert all(p.cpu_util + (p.cpu_pressure or 0) >= 0.5 for p in spinning)
        writing = [p for p in profiles(channel, 2) if class_of(p) == IO]
        assert all(p.write_bytes_per_s >= 20 * MB or (p.io_pressure or 0) >= 0.1 for p in writing)
        # the sleeper uses nothing, in every window
        assert {class_of(p) for p in profiles(channel, 3)} == {LIGHT}
        assert all(p.cpu_util < 0.05 and p.write_bytes_per_s < MB for p in profiles(channel, 3))
        # 300 MB of 1 GiB given: resident, but not the memory class's share of it
        big = [p for p in profiles(channel, 4) if p.rss_bytes >= 300 << 20]
        assert all(p.rss_bytes < 400 << 20 for p in big)
        assert MEMORY not in {class_of(p) for p in big}
        if isolation.base:  # its memory cgroup holds the 300 MB too
            assert all(p.memory_bytes is not None and p.memory_bytes >= 300 << 20 for p in big)
        everything = [p for job_id in jobs for p in profiles(channel, job_id)]
        for p in everything:
            stalls = (p.cpu_pressure, p.memory_pressure, p.io_pressure)
            if stalls_known:
                assert p.source == "cgroup2"
                assert all(s is not None and 0 <= s <= 1 for s in stalls)
            else:
                assert stalls == (None, None, None)
        assert all(p.net_bytes_per_s in (None, 0.0) for p in everything)  # no sockets

    asyncio.run(scenario())


def test_a_first_sample_has_no_profile(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
) -> None:
    """Rates need a window: a job's first sample goes without a profile, the ones after
    it carry one over the time between them."""

    async def scenario() -> list[JobUsage]:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, SLEEPER, workdir))
            await agent.started(1)
            await wait_for(lambda: len(profiles(channel, 1)) >= 2, "two profiles")
            channel.push(Cancel(job_id=1, kill_wait_seconds=1))
            await agent.finished(1)
        return [u for u in channel.usage if u.job_id == 1]

    samples = asyncio.run(scenario())
    assert samples[0].profile is None
    assert all(u.profile is not None for u in samples[1:])
    assert all(1.0 <= u.profile.interval_seconds < 30 for u in samples[1:] if u.profile)
