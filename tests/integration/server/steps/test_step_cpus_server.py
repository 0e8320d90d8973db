"""Steps wait for the CPUs their job's other steps hold, on a real server with real
agents, as Slurm 22.05.8's did (docs/slurm-checks.md, "Steps wait for the CPUs other
steps hold"): ``srun cmd &`` twice in a job runs them one after the other, saying
"step creation temporarily disabled"; ``--exact`` steps share the job's CPUs, one task's
worth each; ``--overlap`` waits for nothing. On the batch node (srun runs the tasks)
and across nodes (the agents do)."""

from __future__ import annotations

import re
from pathlib import Path

from two_agents import (
    SRUN,
    submit,
)

from hal.testing.live import LiveServer, wait_until


def step(options: str, name: str, sleep: int = 0) -> str:
    """A step whose tasks print ``name``, their rank and when they started, leave a file
    ``started.NAMERANK`` in the job's directory (``once_started``), then sleep."""
    return (
        f"{SRUN} {options} sh -c "
        f"'echo {name}$SLURM_PROCID $(date +%s.%N); touch started.{name}$SLURM_PROCID; "
        f"sleep {sleep}'"
    )


def once_started(*tasks: str) -> str:
    """A line of the batch script that waits (10 s at most) until each of ``tasks`` (a
    name and a rank: ``A0``) has started, so that the step asked for next comes after
    theirs: a fixed ``sleep 0.5`` was too short where an ``srun`` takes longer to start."""
    files = " ".join(f"started.{t}" for t in tasks)
    return f"for _ in $(seq 200); do ls {files} >/dev/null 2>&1 && break; sleep 0.05; done"


def finished(live: LiveServer, tmp_path: Path, job_id: int) -> str:
    """The job's output once it has ended."""

    def ended() -> bool:
        with live.client() as c:
            return c.job(job_id).state in ("COMPLETED", "FAILED", "CANCELLED")

    wait_until(ended, 90, message=f"job {job_id} to end")
    return (tmp_path / f"slurm-{job_id}.out").read_text()


def run(live: LiveServer, tmp_path: Path, lines: list[str], *args: str) -> tuple[int, str]:
    job_id = submit(live, tmp_path, "\n".join([*lines, "wait", ""]), *args)
    return job_id, finished(live, tmp_path, job_id)


def started(text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\w+) (\d+\.\d+)$", text, re.M)}


def test_steps_on_the_batch_node_wait_for_the_cpus_others_hold(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """A job of two CPUs on one node: a plain step holds both, so the next waits for it;
    two ``--exact`` steps of one task run together; ``--overlap`` runs beside them."""
    job_id, text = run(
        server,
        tmp_path,
        [
            step("-n1", "A", 3) + " &",
            once_started("A0"),
            step("-n1", "B") + " &",
            "wait",
            step("-n1 --exact", "C", 3) + " &",
            step("-n1 -c1", "D", 3) + " &",  # -c: as --exact
            once_started("C0", "D0"),
            step("-n1 --overlap", "E") + " &",
        ],
        "-n2",
    )
    at = started(text)
    assert at["B0"] - at["A0"] >= 2.9, text  # B ran once A had ended
    assert f"srun: Job {job_id} step creation temporarily disabled, retrying " in text
    assert "(Requested nodes are busy)" in text
    assert f"srun: Step created for job {job_id}" in text
    # (a step that waited for a 3-second one starts 3 s or more after it)
    assert abs(at["D0"] - at["C0"]) < 2.9, text  # together, a CPU each
    assert at["E0"] - at["C0"] < 2.9, text  # beside them
    assert text.count("temporarily disabled") == 1, text  # only B waited


def test_steps_across_nodes_wait_for_the_cpus_others_hold(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """A job on both nodes: a step across them holds the job's CPUs on each, and the
    next one, run by the agents too, waits; both end COMPLETED in sacct."""
    job_id, text = run(
        server,
        tmp_path,
        [step("-N2 -n2", "X", 3) + " &", once_started("X0", "X1"), step("-N2 -n2", "Y") + " &"],
        "-N2",
        "-n2",
    )
    at = started(text)
    assert min(at["Y0"], at["Y1"]) - max(at["X0"], at["X1"]) >= 2.5, text
    assert f"srun: Step created for job {job_id}" in text
    done = server.cli("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State")
    assert f"{job_id}.0|COMPLETED" in done.stdout, done.stdout
    assert f"{job_id}.1|COMPLETED" in done.stdout, done.stdout


def test_a_step_whose_srun_was_killed_does_not_hold_the_cpus_for_ever(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """srun killed with SIGKILL never reports its step's end; the next srun on the node
    finds that srun gone, ends the step (CANCELLED 0:9 in sacct) and runs."""
    job_id, text = run(
        server,
        tmp_path,
        [
            f"{SRUN} sleep 4 &",
            "sleep 3",
            "kill -9 $!",
            step("-n1", "after"),
        ],
        "-n1",
    )
    assert f"srun: warning: step {job_id}.0 ended: its srun (pid " in text, text
    assert "after0" in text, text
    assert "temporarily disabled" not in text, text  # it did not wait for the dead one
    done = server.cli("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State,ExitCode")
    assert f"{job_id}.0|CANCELLED|0:9" in done.stdout, done.stdout
    assert f"{job_id}.1|COMPLETED|0:0" in done.stdout, done.stdout
