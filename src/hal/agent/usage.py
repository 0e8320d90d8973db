"""``UsageSampler``: what the running jobs and step tasks on this node use, for the long
poll (``sstat``, ``seff``, ``GET /v1/jobs/{id}`` of a running job), and the GPUs' health.

Before each long poll, at most every ``USAGE_MIN_INTERVAL_S``, it reads each batch job's
supervisor tree in ``/proc`` (``procfs.job_usage``: the live processes' RSS summed, as
Slurm's ``jobacct_gather/linux``, and their CPU time with that of the processes already
reaped) and each step task's tree (``procfs.tree_usage``), off the event loop, with one
NVML read for those given GPUs (``gpuusage``: summed over each tree, a tally per job and
per task). It keeps the most RSS each one's samples showed, which a job's end report
takes when it is more than the supervisor's own figure (``finished``: sacct never shows
less than sstat did), and its GPU tally (``JobReport.gpu``).

With the same walk it reads each job's cumulative counters (its cgroups' CPU, memory,
I/O and pressure-stall figures, or its processes' in ``/proc``), and sends the job's
profile over the window since its previous sample (``hal.agent.profile``) with its
usage (``JobUsage.profile``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from hal.agent.gpuusage import GpuSampler, GpuTally, ProcessGpu, use_of
from hal.agent.isolation import Isolation
from hal.agent.procfs import Usage, descendants, job_usage, tree_usage
from hal.agent.profile import Counters, ProfileSampler, read_counters
from hal.agent.records import ExitOutcome, StepKey
from hal.agent.steps import StepShell, TaskRef
from hal.host.process import start_ticks
from hal.wire.agent import JobUsage, StepTaskUsage

log = logging.getLogger("hal.agent")

# running jobs' usage goes with every long poll, at most this often (a busy node's polls
# come back early with every launch); the server keeps the last sample until the next
USAGE_MIN_INTERVAL_S = 2.0
Supervised = tuple[int, int, int, int]  # (job, attempt, supervisor pid, its start ticks)
# one usage sample: the jobs' (job, attempt, (RSS, CPU), GPU use, profile counters),
# the step tasks' ((job, run, step, rank, pid), (RSS, CPU)) and those tasks' GPU use by
# (step, rank)
_Sampled = tuple[
    list[tuple[int, int, Usage, ProcessGpu | None, Counters]],
    list[tuple[TaskRef, Usage]],
    dict[tuple[StepKey, int], ProcessGpu],
]


class UsageSampler:
    def __init__(self) -> None:
        # NVML per-process GPU use, once GPUs are found (AgentShell.run); tests may set
        # their own
        self.gpu_sampler: GpuSampler | None = None
        self.gpu_problems: list[str] | None = None  # the last health read's (gpuhealth)
        self._peaks: dict[tuple[int, int], int] = {}  # (job, attempt) → most RSS sampled
        self._gpu_tallies: dict[tuple[int, int], GpuTally] = {}  # jobs given GPUs
        self._health_read_at = 0.0  # monotonic time of that read
        self._sampled_at = -USAGE_MIN_INTERVAL_S  # monotonic time of the last sample
        # where the jobs' cgroups are (the shell sets the agent's once detected)
        self.isolation = Isolation("none")
        # the traffic telemetry's bytes a second per (job, attempt) at its last read;
        # None: it attributes none (the shell sets ``TrafficSampler.job_rates``)
        self.net_rates: Callable[[], Mapping[tuple[int, int], float] | None] = lambda: None
        self.profiles = ProfileSampler()  # each job's counters from sample to sample

    async def sample(
        self, watched: list[Supervised], gpu_jobs: set[int], steps: StepShell
    ) -> tuple[list[JobUsage], list[StepTaskUsage]]:
        """What the running jobs (``watched``; ``gpu_jobs`` given GPUs here) and step
        tasks use now, with the most memory each one's samples have shown, and for those
        given GPUs here their tallies of one NVML read; nothing when the last sample is
        under ``USAGE_MIN_INTERVAL_S`` old."""
        now = time.monotonic()
        if now - self._sampled_at < USAGE_MIN_INTERVAL_S:
            return [], []
        self._sampled_at = now
        tasks = steps.usage_targets()  # checked by start time: no recycled pids
        sampler = self.gpu_sampler
        on_gpus = {job_id for job_id, _, _, _ in watched if job_id in gpu_jobs}
        gpu_steps = steps.gpu_steps()
        read_gpus = sampler is not None and bool(
            on_gpus or any((t[0], t[1], t[2]) in gpu_steps for t in tasks)
        )

        def sample() -> _Sampled:
            # one NVML read for the jobs and the step tasks given GPUs here, and one walk
            # of each process tree for its memory, CPU and GPU use and its profile's counters
            gpu = sampler.sample() if sampler is not None and read_gpus else None
            step_tasks = []
            task_gpu = {}
            # each job's step tasks' processes and what they use, for its profile
            task_pids: dict[tuple[int, int], list[int]] = {}
            task_use: dict[tuple[int, int], Usage] = {}
            for job_id, attempt, step_id, rank, root in tasks:
                key = (job_id, attempt, step_id)
                below = descendants(root)
                use = tree_usage(root, below)
                step_tasks.append(((*key, rank, root), use))
                task_pids.setdefault((job_id, attempt), []).extend([root, *below])
                rss, user, system = task_use.get((job_id, attempt), Usage(0, 0.0, 0.0))
                task_use[(job_id, attempt)] = Usage(
                    rss + use.rss_bytes, user + use.user_seconds, system + use.system_seconds
                )
                if gpu is not None and key in gpu_steps:
                    # a task's tree is the task and the processes below it
                    task_gpu[(key, rank)] = use_of([root, *below], gpu)
            jobs: list[tuple[int, int, Usage, ProcessGpu | None, Counters]] = []
            for job_id, attempt, pid, ticks in watched:
                if start_ticks(pid) != ticks:
                    continue  # not our supervisor any more: a recycled pid
                below = descendants(pid)
                gpu_use = use_of(below, gpu) if gpu is not None and job_id in on_gpus else None
                used = job_usage(pid, below)
                counters = self._counters(
                    (job_id, attempt),
                    used,
                    [pid, *below, *task_pids.get((job_id, attempt), ())],
                    task_use.get((job_id, attempt), Usage(0, 0.0, 0.0)),
                )
                jobs.append((job_id, attempt, used, gpu_use, counters))
            return jobs, step_tasks, task_gpu

        sampled, step_tasks, task_gpu = (
            await asyncio.to_thread(sample) if watched or tasks else ([], [], {})
        )
        step_usage = steps.usage(step_tasks, task_gpu)
        peaks: dict[tuple[int, int], int] = {}
        usage: list[JobUsage] = []
        current = {(job_id, attempt) for job_id, attempt, _, _ in watched}
        for key in self._gpu_tallies.keys() - current:  # ended (``finished`` took it)
            del self._gpu_tallies[key]
        self.profiles.keep(current)
        rates = self.net_rates()
        for job_id, attempt, (rss, user, system), gpu_use, counters in sampled:
            peak = peaks[(job_id, attempt)] = max(rss, self._peaks.get((job_id, attempt), 0))
            tally = None
            if gpu_use is not None and (job_id, attempt) in current:
                tally = self._gpu_tallies.setdefault((job_id, attempt), GpuTally())
                tally.add(gpu_use)
            usage.append(
                JobUsage(
                    job_id=job_id,
                    attempt=attempt,
                    rss_bytes=rss,
                    max_rss_bytes=peak,
                    cpu_seconds=user + system,
                    user_cpu_seconds=user,
                    system_cpu_seconds=system,
                    gpu=tally.usage() if tally is not None else None,
                    profile=self.profiles.profile(
                        (job_id, attempt),
                        counters,
                        None if rates is None else rates.get((job_id, attempt), 0.0),
                    ),
                )
            )
        self._peaks = peaks  # (ended jobs' go)
        return usage, step_usage

    def _counters(
        self, key: tuple[int, int], used: Usage, pids: list[int], steps: Usage
    ) -> Counters:
        """The job ``key``'s profile counters now (in the sampling thread): from its
        cgroups where it has them, else from ``pids`` (its processes: the supervisor, the
        batch script's tree, its step tasks' trees) and the usage sampled for them (the
        batch script's ``used``, its step tasks' ``steps``)."""
        isolation = self.isolation
        group = isolation.group_path(*key)
        cgroup2 = group if isolation.kind == "cgroup2" else isolation.accounting_group(group)
        return read_counters(
            time.monotonic(),
            proc_cpu_seconds=used.cpu_seconds + steps.cpu_seconds,
            rss_bytes=used.rss_bytes + steps.rss_bytes,
            pids=pids,
            cgroup2=cgroup2,
            cgroup1_memory=group if isolation.kind == "cgroup1" else "",
        )

    def finished(self, job: tuple[int, int], status: ExitOutcome) -> ExitOutcome:
        """A job's end as its supervisor saw it, with what the samples add: MaxRSS the
        most any sample saw, as Slurm's (sstat showed it: sacct must not show less), or
        the supervisor's figure where that is more; its GPU tally."""
        sampled = self._peaks.get(job, 0)
        if sampled > status.max_rss_bytes:
            status = replace(status, max_rss_bytes=sampled)
        tally = self._gpu_tallies.pop(job, None)
        if tally is not None:
            status = replace(status, gpu=tally.usage())
        return status

    async def read_health(self, interval: float) -> None:
        """Every ``interval`` seconds, the GPUs' problems (``gpuhealth``), read off the
        event loop; each sync carries the last read's (``gpu_problems``)."""
        sampler = self.gpu_sampler
        now = time.monotonic()
        if sampler is None or interval <= 0:
            return
        if self.gpu_problems is not None and now - self._health_read_at < interval:
            return
        self._health_read_at = now
        problems = await asyncio.to_thread(sampler.health)
        if problems != self.gpu_problems:
            if problems:
                log.warning("GPU health: %s", "; ".join(problems))
            elif self.gpu_problems:
                log.info("GPU health: no problem left")
        self.gpu_problems = problems
