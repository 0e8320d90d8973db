"""Steps wait for the memory their job's other steps hold, on a real server with real
agents, as Slurm 22.05.8's did with memory a consumable resource (docs/slurm-checks.md,
"Steps hold their job's memory"): in a job of ``--mem=200M`` an ``--exact`` step without
``--mem`` holds all of it, so the next waits with a CPU free; two of ``--mem=100M`` run
together; ``--overlap`` waits for nothing; more than the job has is refused. Across
nodes a job's ``--mem-per-cpu`` gives each step that much per CPU it holds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from test_step_cpus_server import once_started, run, started, step

from hal.testing.live import LiveServer


def test_steps_on_the_batch_node_wait_for_the_memory_others_hold(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    show = "scontrol show step $SLURM_JOB_ID.2 | grep TRES="
    job_id, text = run(
        server,
        tmp_path,
        [
            step("-n1 --exact", "A", 3) + " &",
            once_started("A0"),
            step("-n1 --exact", "B") + " &",  # a CPU free, the memory held
            "wait",
            step("-n1 --exact --mem=100M", "C", 3) + " &",
            step("-n1 --exact --mem=100M", "D", 3) + " &",
            once_started("C0", "D0"),
            step("-n1 --overlap", "E") + " &",
            f"{sys.executable} -m hal.cli.main {show}",
            "wait",
            step("-n1 --mem=300M", "F") + "; echo rc=$?",
        ],
        "-n2",
        "--mem=200M",
    )
    at = started(text)
    assert at["B0"] - at["A0"] >= 2.9, text  # B ran once A had ended
    assert f"srun: Job {job_id} step creation temporarily disabled, retrying " in text
    assert abs(at["D0"] - at["C0"]) < 2.9, text  # together, 100M each
    assert at["E0"] - at["C0"] < 2.9, text  # beside them
    assert re.search(r"TRES=cpu=1,mem=100M,node=1", text), text  # C or D, step 2
    assert "F0" not in text and "rc=1" in text, text
    assert f"Unable to create step for job {job_id}: Memory required by task is not" in text
    # sacct's AllocCPUS and AllocTRES of each step: what it was given, as scontrol's TRES
    done = server.cli("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,AllocCPUS,AllocTRES")
    steps = done.stdout.splitlines()[2:]
    assert steps[0] == f"{job_id}.0|1|cpu=1,mem=200M,node=1", done.stdout
    assert steps[2] == f"{job_id}.2|1|cpu=1,mem=100M,node=1", done.stdout
    assert steps[4] == f"{job_id}.4|2|cpu=2,mem=200M,node=1", done.stdout  # --overlap's


def test_steps_across_nodes_hold_the_jobs_memory_per_cpu(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """``--mem-per-cpu=100M`` on two CPUs a node: a step of ``--mem=150M`` on both nodes
    leaves 50M on each, so the next ``--exact`` step (a CPU each, 100M) waits for it,
    though a CPU is free on each node; the agents run both."""
    _, text = run(
        server,
        tmp_path,
        [
            step("-N2 -n2 --exact --mem=150M", "X", 3) + " &",
            once_started("X0", "X1"),
            step("-N2 -n2 --exact", "Y") + " &",
        ],
        "-N2",
        "-n4",
        "--mem-per-cpu=100M",
    )
    at = started(text)
    assert min(at["Y0"], at["Y1"]) - max(at["X0"], at["X1"]) >= 2.5, text
