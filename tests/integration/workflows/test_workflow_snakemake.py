"""Snakemake 9.27.1 with snakemake-executor-plugin-slurm 2.8.0, unchanged, against HAL.

The plugin submits each rule with ``sbatch --parsable --job-name <run_uuid> --output
<log> --export=ALL --comment rule_<name> ... --mem --ntasks --cpus-per-task -D <dir>``
and the job script on stdin; it reads ``scontrol show config`` (``MinJobAge``,
``MaxArraySize``), guesses an account with ``sacct -nu <user> -o Account%256``, and
polls ``sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State
--starttime <2 days ago> --endtime now --name <run_uuid>`` (or ``squeue --format='%i|%T'
--states=all --noheader --name <run_uuid>``), expecting full state names.

Inside each job Snakemake re-runs itself through the ``slurm-jobstep`` executor, which
launches the rule with ``srun -n1 --cpu-bind=q --cpus-per-task=N --nodes=1 <cmd>``, which
HAL's ``srun`` shim runs as a pass-through inside the job (src/hal/compat/srun.py).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hal.testing.live import LiveServer

# found, not imported (0.7 s of CPU in each xdist worker): the tests run snakemake itself
if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
    pytest.skip(
        "snakemake-executor-plugin-slurm is not installed (pip install '.[workflows]')",
        allow_module_level=True,
    )

SNAKEFILE = """\
localrules: all

rule all:
    input: "b.txt", "boom.txt"

rule make_a:
    output: "a.txt"
    shell: "echo a-from-job-$SLURM_JOB_ID > {output}"

rule make_b:
    input: "a.txt"
    output: "b.txt"
    shell: "cat {input} > {output} && echo b-from-job-$SLURM_JOB_ID >> {output}"

rule boom:
    output: "boom.txt"
    shell: "exit 3"
"""


def run_snakemake(
    workdir: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--executor",
            "slurm",
            "--jobs",
            "2",
            "--default-resources",
            # the job holds two snakemake processes (the jobstep and the one its srun
            # runs, ~120 MB resident each, libraries shared) and srun waiting beside its
            # step (~11 MB): 200 MB was at the edge once srun stopped exec'ing its task
            "mem_mb=400",
            "runtime=5",
            # the wait before a status check while no check has seen a job end, and after
            # one that has (default 40 s; only the waits change, not the commands); a
            # check that sees none end waits 10 s more. A rule's job takes ~5 s (Snakemake
            # starting inside it): after 1 s the first check found none ended, and the
            # next came 11 s later, in each of the workflow's two rounds
            "--slurm-init-seconds-before-status-checks",
            "6",
            "--latency-wait",
            "10",
            "--nolock",
            *extra,
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


@pytest.mark.slow
def test_two_rule_workflow_runs_as_hal_jobs_and_a_failing_rule_is_reported(
    slurm_env: dict[str, str],
    hal_cluster: LiveServer,
    tmp_path: Path,
    agent_logs: Callable[[], str],
) -> None:
    """`snakemake --executor slurm --jobs 2 --keep-going` on a workflow where `make_b`
    needs `make_a`'s output and an independent rule `boom` exits 3. The two chained rules
    run as HAL jobs named after the run UUID and write their outputs; the plugin's sacct
    polling (`--name <uuid>`, full state names) sees them COMPLETED and `boom` FAILED, so
    Snakemake reports that rule's error and exits non-zero, instead of waiting forever or
    taking the failure for success."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    done = run_snakemake(workdir, slurm_env, "--keep-going", "--verbose")
    log = done.stdout + done.stderr
    assert (workdir / "b.txt").exists(), f"{log[-6000:]}\n{agent_logs()}"

    with hal_cluster.client() as client:
        jobs = {j.id: j for j in client.jobs(include_finished=True)}
    a_text, b_text = (workdir / "a.txt").read_text(), (workdir / "b.txt").read_text()
    a_id = int(a_text.strip().rsplit("-", 1)[1])
    b_id = int(b_text.strip().splitlines()[-1].rsplit("-", 1)[1])
    assert b_text.splitlines()[0] == a_text.strip()
    assert a_id != b_id
    assert jobs[a_id].state == jobs[b_id].state == "COMPLETED"
    (boom,) = [j for j in jobs.values() if j.id not in (a_id, b_id)]
    # The job runs Snakemake's in-job helper, which exits 1 when its rule fails.
    assert boom.state == "FAILED" and boom.exit_code == 1, boom
    assert jobs[a_id].name == jobs[b_id].name == boom.name  # --job-name <run_uuid>

    assert "MinJobAge 300s" in log  # parsed from HAL's `scontrol show config`
    assert "command=sacct" in log  # status came from sacct --name <uuid>
    assert f"SLURM-job '{boom.id}' failed, SLURM status is: 'FAILED'" in log, log[-3000:]
    assert not (workdir / "boom.txt").exists()
    assert done.returncode == 1, log[-3000:]
