"""The foundation end to end: real server, real agents, real processes, Slurm commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    data = tmp_path_factory.mktemp("hal")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as server,
        server.agents(2, cpus=2, memory="1G"),
    ):
        yield server


def finished(server: LiveServer, job_id: int | str) -> bool:
    with server.client() as c:
        return c.job(job_id).state not in ("PENDING", "RUNNING", "COMPLETING")


def kib(value: str) -> float:
    """sacct's and sstat's MaxRSS in KiB. Mostly ``85504K``, but Slurm moves to the next
    unit when the KiB are a multiple of 512 (``memory_kib``): ``83.50M`` for one peak in
    128, which made the tests that wanted ``K`` fail now and then."""
    units = {"K": 1, "M": 1 << 10, "G": 1 << 20}
    assert value[-1] in units, value
    return float(value[:-1]) * units[value[-1]]


def test_sbatch_script_runs_and_writes_output(cluster: LiveServer, tmp_path: Path) -> None:
    """An unchanged Slurm batch script runs as a real process with SLURM_* variables and
    its output lands in slurm-<id>.out in the submit directory."""
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -J hello\n#SBATCH --cpus-per-task=1\n"
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME nodes=$SLURM_JOB_NODELIST"\n'
    )
    done = cluster.cli("sbatch", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Submitted batch job ")
    job_id = int(done.stdout.split()[-1])
    wait_until(lambda: finished(cluster, job_id), message="the job to finish")
    with cluster.client() as c:
        info = c.job(job_id)
    assert info.state == "COMPLETED", info
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert f"id={job_id} name=hello nodes=node" in out


def test_the_job_runs_with_its_submitters_umask(cluster: LiveServer, tmp_path: Path) -> None:
    """A user with umask 077 gets private files from the job, as with Slurm (sbatch
    sends SLURM_UMASK, the node applies it), not the agent's umask; a REST client may
    name one in its submission."""
    done = cluster.cli(
        "sbatch", "--parsable", "--wrap", "touch private; echo $SLURM_UMASK", cwd=tmp_path,
        umask=0o077,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    script = "#!/bin/sh\ntouch shared\n"
    with cluster.client() as c:
        rest = c.submit(JobSubmit(script=script, workdir=str(tmp_path), umask="0027")).job_id
    for job in (job_id, rest):
        wait_until(lambda job=job: finished(cluster, job), message="the jobs to finish")
    assert ((tmp_path / "private").stat().st_mode & 0o777) == 0o600
    assert (tmp_path / f"slurm-{job_id}.out").read_text() == "0077\n"
    assert ((tmp_path / f"slurm-{job_id}.out").stat().st_mode & 0o777) == 0o600
    assert ((tmp_path / "shared").stat().st_mode & 0o777) == 0o640


def test_failing_job_reports_exit_code_and_sacct_sees_it(
    cluster: LiveServer, tmp_path: Path
) -> None:
    """`exit 3` ends FAILED with ExitCode 3:0 in squeue -t all and sacct."""
    done = cluster.cli("sbatch", "--parsable", "--wrap", "exit 3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    wait_until(lambda: finished(cluster, job_id), message="the job to fail")
    sq = cluster.cli("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%i %t %r")
    assert sq.stdout.split() == [job_id, "F", "NonZeroExitCode"], sq
    sa = cluster.cli(
        "sacct",
        "-X",
        "--parsable2",
        "--noheader",
        "-j",
        job_id,
        "--format=JobIdRaw,State,ExitCode",
    )
    assert sa.stdout.strip() == f"{job_id}|FAILED|3:0", sa


def test_wait_returns_the_job_exit_code(cluster: LiveServer, tmp_path: Path) -> None:
    """`sbatch --wait --wrap "exit 7"` exits 7, as with Slurm."""
    done = cluster.cli("sbatch", "--wait", "--wrap", "exit 7", cwd=tmp_path)
    assert done.returncode == 7, (done.stdout, done.stderr)


def test_sbatch_wait_from_the_environment(cluster: LiveServer, tmp_path: Path) -> None:
    """``SBATCH_WAIT=1`` is ``--wait`` (Slurm 22.05.8; HAL returned at once, rc 0), and a
    variable of an option HAL lacks is named rather than silently ignored."""
    env = {**cluster.env(), "SBATCH_WAIT": "1", "SBATCH_CPUS_PER_GPU": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", "sbatch", "--wrap", "exit 3"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "SBATCH_CPUS_PER_GPU is not supported by HAL: ignored" in done.stderr


def test_unknown_partition_is_refused_like_slurm(cluster: LiveServer, tmp_path: Path) -> None:
    done = cluster.cli("sbatch", "-p", "nosuch", "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 1
    assert "sbatch: error: Batch job submission failed: Invalid partition name" in done.stderr


def test_oversized_request_is_refused(cluster: LiveServer, tmp_path: Path) -> None:
    done = cluster.cli("sbatch", "--mem=64T", "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 1
    assert "Requested node configuration is not available" in done.stderr


def test_ntasks_per_node_is_a_maximum_under_ntasks(cluster: LiveServer, tmp_path: Path) -> None:
    """sbatch.1: with --ntasks, --ntasks-per-node is "a maximum count of tasks per node",
    so `-n 4 --ntasks-per-node=2` takes two nodes of two CPUs. HAL gave it one node with
    two CPUs for its four tasks; with -N 1 given too the request cannot be met and is
    refused, as Slurm refuses it."""
    done = cluster.cli(
        "sbatch", "--parsable", "-n", "4", "--ntasks-per-node=2",
        "--wrap", "echo $SLURM_JOB_NUM_NODES $SLURM_TASKS_PER_NODE", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    wait_until(lambda: finished(cluster, job_id), message="the job to finish")
    with cluster.client() as c:
        info = c.job(job_id)
    assert info.state == "COMPLETED", info
    assert (tmp_path / f"slurm-{job_id}.out").read_text() == "2 2(x2)\n"
    done = cluster.cli(
        "sbatch", "-N", "1", "-n", "4", "--ntasks-per-node=2", "--wrap", "true", cwd=tmp_path
    )
    assert done.returncode == 1
    assert "Requested node configuration is not available" in done.stderr


def test_array_with_throttle_and_dependency(cluster: LiveServer, tmp_path: Path) -> None:
    """A throttled array runs every element; an afterok job waits for all of them."""
    arr = cluster.cli(
        "sbatch",
        "--parsable",
        "--array=0-5%2",
        "-o",
        "arr-%A_%a.out",
        "--wrap",
        "echo $SLURM_ARRAY_TASK_ID",
        cwd=tmp_path,
    )
    assert arr.returncode == 0, arr.stderr
    array_id = arr.stdout.strip()
    dep = cluster.cli(
        "sbatch",
        "--parsable",
        f"--dependency=afterok:{array_id}",
        "--wrap",
        "echo after",
        cwd=tmp_path,
    )
    assert dep.returncode == 0, dep.stderr
    dep_id = dep.stdout.strip()
    wait_until(lambda: finished(cluster, dep_id), timeout=60, message="the dependent job")
    with cluster.client() as c:
        elements = c.jobs(ids=[array_id], include_finished=True)
        assert sorted(j.array_task_id or 0 for j in elements) == [0, 1, 2, 3, 4, 5]
        assert {j.state for j in elements} == {"COMPLETED"}
        assert c.job(dep_id).state == "COMPLETED"
        last_start = max(j.start_time or 0 for j in elements)
        assert (c.job(dep_id).start_time or 0) >= last_start
    for i in range(6):
        assert (tmp_path / f"arr-{array_id}_{i}.out").read_text().strip() == str(i)


def test_sacct_batch_step_of_an_array_is_every_elements_batch_step(
    cluster: LiveServer, tmp_path: Path
) -> None:
    """``sacct -j ARRAY.batch`` shows the batch step of each element, as ``-j ARRAY``
    shows each element: only element 0 (whose raw id is the array's) gave its step, the
    others their whole-job lines."""
    arr = cluster.cli("sbatch", "--parsable", "--array=0-2", "--wrap", "true", cwd=tmp_path)
    assert arr.returncode == 0, arr.stderr
    array_id = arr.stdout.strip()
    wait_until(
        lambda: all(finished(cluster, f"{array_id}_{i}") for i in range(3)),
        message="the array's elements",
    )
    sa = cluster.cli("sacct", "-n", "-P", "-o", "JobID,JobName", "-j", f"{array_id}.batch")
    assert sa.stdout.split() == [f"{array_id}_{i}.batch|batch" for i in range(3)], sa


def test_sacct_and_seff_report_what_a_job_used(cluster: LiveServer, tmp_path: Path) -> None:
    """A job that holds 80 MB and spins a CPU for a second of CPU time: sacct's batch step shows the
    peak memory and CPU time its agent measured, seff the efficiency against the 200 MB
    and the CPU it held."""
    burn = (
        f"{sys.executable} -c 'import time; b = bytes(range(256)) * (80 << 12)\n"
        "while time.process_time() < 1: pass'"
    )
    done = cluster.cli("sbatch", "--parsable", "--mem=200M", "--wrap", burn, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    wait_until(lambda: finished(cluster, job_id), message="the job to end")
    sa = cluster.cli("sacct", "-n", "-P", "-j", job_id, "-o", "JobID,State,MaxRSS,TotalCPU")
    job_line, step_line = sa.stdout.split()
    step, state, max_rss, total_cpu = step_line.split("|")
    assert (step, state) == (f"{job_id}.batch", "COMPLETED"), sa.stdout
    assert 80 << 10 <= kib(max_rss) < 200 << 10, max_rss
    minutes, seconds = total_cpu.split(":")  # MM:SS.mmm under an hour
    assert minutes == "00" and 1 <= float(seconds) < 30, total_cpu
    assert job_line.split("|")[2] == ""  # the job line leaves memory to its steps
    seff = cluster.cli("seff", job_id).stdout.splitlines()
    assert seff[0] == f"Job ID: {job_id}" and "State: COMPLETED (exit code 0)" in seff
    used = next(line for line in seff if line.startswith("Memory Utilized: "))
    assert used.endswith(" MB") and 80 <= float(used.split()[2]) < 200, seff
    efficiency = next(line for line in seff if line.startswith("CPU Efficiency: "))
    assert float(efficiency.split()[2].rstrip("%")) > 5, seff  # it spun (on a busy host)


def test_sstat_reports_a_running_jobs_usage(cluster: LiveServer, tmp_path: Path) -> None:
    """A running job holding 60 MB after half a CPU second: its agent's samples reach
    ``GET /v1/jobs/{id}``, ``sstat`` and ``seff`` within a heartbeat or two."""
    hold = (
        f"{sys.executable} -c 'import time; b = bytes(range(256)) * (60 << 12)\n"
        "while time.process_time() < 0.5: pass\n"
        "time.sleep(300)'"
    )
    done = cluster.cli("sbatch", "--parsable", "--mem=200M", "--wrap", hold, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    with cluster.client() as c:
        wait_until(
            lambda: c.job(job_id).cpu_seconds >= 0.4 and c.job(job_id).max_rss_bytes >= 60 << 20,
            timeout=30,
            message="a usage sample of the running job",
        )
        info = c.job(job_id)
        assert info.state == "RUNNING" and info.usage_time is not None
        assert info.rss_bytes is not None and 60 << 20 <= info.rss_bytes < 200 << 20
        out = cluster.cli("sstat", "-n", "-P", "-j", job_id, "-o", "JobID,MaxRSS,AveCPU,NTasks")
        step, max_rss, ave_cpu, tasks = out.stdout.strip().split("|")
        assert (step, tasks) == (f"{job_id}.batch", "1"), out
        assert kib(max_rss) >= 60 << 10, max_rss
        assert ave_cpu.startswith("00:00.") or ave_cpu.startswith("00:01."), ave_cpu
        seff = cluster.cli("seff", job_id).stdout.splitlines()
        assert seff[-1] == "WARNING: Efficiency statistics may be misleading for RUNNING jobs."
        c.cancel(job_id)
    wait_until(lambda: finished(cluster, job_id), message="the cancel")
    gone = cluster.cli("sstat", "-j", job_id)
    assert gone.returncode == 1 and "no running job" in gone.stderr


def test_cancel_running_job(cluster: LiveServer, tmp_path: Path) -> None:
    """scancel ends a running job: CANCELLED, its process gone."""
    done = cluster.cli("sbatch", "--parsable", "--wrap", "sleep 300", cwd=tmp_path)
    job_id = done.stdout.strip()
    with cluster.client() as c:
        wait_until(lambda: c.job(job_id).state == "RUNNING", message="the job to start")
    assert cluster.cli("scancel", job_id).returncode == 0
    wait_until(lambda: finished(cluster, job_id), message="the job to end")
    with cluster.client() as c:
        assert c.job(job_id).state == "CANCELLED"


def test_time_limit_gives_timeout(cluster: LiveServer, tmp_path: Path) -> None:
    """A job past its time limit gets SIGTERM, then SIGKILL after KillWait: TIMEOUT."""
    with cluster.client() as c:
        res = c.submit(
            JobSubmit(script="#!/bin/sh\nsleep 60\n", workdir=str(tmp_path), time_limit_seconds=1)
        )
        wait_until(lambda: finished(cluster, res.job_id), message="the time limit")
        info = c.job(res.job_id)
    assert info.state == "TIMEOUT"
    assert info.reason == "TimeLimit"


def test_users_cannot_touch_each_others_jobs(cluster: LiveServer, tmp_path: Path) -> None:
    with cluster.client() as admin:
        bob = admin.add_user("bob")
        held = admin.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), hold=True))
    from hal.core.errors import PermissionDenied

    with cluster.client(bob.token) as c:
        with pytest.raises(PermissionDenied):
            c.cancel(held.job_id)
        with pytest.raises(PermissionDenied):
            c.job_script(held.job_id)
        wait_until(
            lambda: c.job(held.job_id).reason == "JobHeldUser",
            message="the scheduler to give the held job its reason",
        )
    with cluster.client() as admin:
        admin.cancel(held.job_id)


def test_holding_another_users_running_job_is_refused(cluster: LiveServer, tmp_path: Path) -> None:
    """``scontrol hold|release`` of someone else's job is "Access/permission denied" in
    Slurm whatever its state. Carol's hold and release of the admin's running job answered
    200 with no job changed (the state was filtered before the owner was checked), so
    `scontrol hold` said nothing and exited 0."""
    from hal.core.errors import PermissionDenied

    with cluster.client() as admin:
        carol = admin.add_user("carol")
        job = admin.submit(JobSubmit(script="#!/bin/sh\nsleep 60\n", workdir=str(tmp_path)))
        wait_until(lambda: admin.job(job.job_id).state == "RUNNING", message="the job to start")
    try:
        with cluster.client(carol.token) as c:
            with pytest.raises(PermissionDenied):
                c.hold(job.job_id)
            with pytest.raises(PermissionDenied):
                c.release(job.job_id)
    finally:
        with cluster.client() as admin:
            admin.cancel(job.job_id)


def test_job_submitted_from_a_job_sees_its_own_variables(
    cluster: LiveServer, tmp_path: Path
) -> None:
    """sbatch run inside a job (a pipeline's next step, a workflow tool's head job) exports
    the parent's SLURM_* variables; the child must see its own id, name, CPUs and no array
    index, as with Slurm, not the parent's."""
    child = tmp_path / "child.sh"
    child.write_text(
        "#!/bin/sh\n#SBATCH -J child -c 1 -o child.out\n"
        'echo "$SLURM_JOB_ID $HAL_JOB_ID $SLURM_JOB_NAME $SLURM_CPUS_PER_TASK '
        '${SLURM_ARRAY_TASK_ID:-none} ${SLURM_ARRAY_JOB_ID:-none}"\n'
    )
    parent = tmp_path / "parent.sh"
    parent.write_text(
        "#!/bin/sh\n#SBATCH -J parent -c 2 -o parent.out\n"
        f"{sys.executable} -m hal.cli.main sbatch --parsable {child} > child.id\n"
    )
    done = cluster.cli("sbatch", "--parsable", "--array=3", str(parent), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    parent_id = done.stdout.strip()
    wait_until(lambda: finished(cluster, parent_id), message="the parent job")
    child_id = (tmp_path / "child.id").read_text().strip()
    assert child_id.isdigit(), (tmp_path / "parent.out").read_text()
    wait_until(lambda: finished(cluster, child_id), message="the child job")
    seen = (tmp_path / "child.out").read_text().split()
    assert seen == [child_id, child_id, "child", "1", "none", "none"]
