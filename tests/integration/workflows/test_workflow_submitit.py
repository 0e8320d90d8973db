"""submitit 1.5.4's ``SlurmExecutor`` (``AutoExecutor(cluster="slurm")``), unchanged, against HAL.

What submitit runs (submitit/slurm/slurm.py, core/core.py, core/job_environment.py):

- It writes ``<folder>/.submission_file_<uuid>.sh`` and runs ``sbatch <file>`` (no
  ``--parsable``), taking the id with the regex ``job (?P<id>[0-9]+)``. The script has,
  sorted, ``#SBATCH --cpus-per-task --error=<folder>/%j_0_log.err --job-name=submitit
  --mem=512MB --nodes=1 --ntasks-per-node --open-mode=append --output=<..>/%j_0_log.out
  --signal=USR2@90 --time=<min> --wckey=submitit`` (``--array=0-N%P`` and ``%A_%a`` in
  the paths for ``map_array``), then ``export SUBMITIT_EXECUTOR=slurm`` and ``srun
  --unbuffered --output <..>/%j_%t_log.out --error <..>/%j_%t_log.err python -u -m
  submitit.core._submit <folder>``.
- It polls ``sacct -o JobID,State,NodeList --parsable2 -j <id> [-j <id>...]``, skipping
  ``N.batch``/``N.0`` lines and reading ``N_I`` (or ``N_[a-b%p]``) array lines; a job is
  done once its State is none of READY PENDING RUNNING UNKNOWN REQUEUED COMPLETING
  PREEMPTED. ``job.result()`` mostly waits for ``<id>_<task>_result.pkl`` itself.
- Cancel is ``scancel <id>``. ``job._interrupt()`` (preemption) runs ``scancel <id>
  --signal SIGTERM`` then ``scancel <id> --signal USR2``. Inside the job, submitit traps
  USR2 (and bypasses SIGTERM/SIGCONT), pickles ``checkpoint()``'s state and runs
  ``scontrol requeue <id>`` (``N_I`` for an array element), expecting it to exit 0.
- ``JobEnvironment`` reads SLURM_JOB_ID, SLURM_ARRAY_JOB_ID/TASK_ID, SLURM_NTASKS,
  SLURM_JOB_NUM_NODES, SLURM_NODEID, SLURM_PROCID, SLURM_LOCALID, SLURM_JOB_NODELIST.

Real Slurm 22.05.8 (hal.bench.slurm_peer) runs all of this, and so does HAL. An
older HAL refused every submitit job (``--open-mode``, ``--wckey``, srun's
``--output``/``--error``), sent ``--signal=USR2@90`` to the batch shell too (it died of it),
and an in-job ``scontrol requeue`` died of its own requeue's SIGTERM (rc -15); the two
mechanism tests check those two alone, with plain sbatch jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

submitit = pytest.importorskip(
    "submitit", reason="submitit is not installed (pip install submitit)"
)
import cloudpickle  # noqa: E402  (submitit's own dependency)
from submitit.core.utils import FailedJobError  # noqa: E402
from submitit.slurm.slurm import SlurmExecutor, SlurmJob  # noqa: E402

# The job's python cannot import this test module: pickle its functions and classes by
# value, as they would be from a user's __main__.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60  # seconds; every job here ends in a few


@pytest.fixture
def executor(slurm_env: dict[str, str], tmp_path: Path) -> Iterator[submitit.AutoExecutor]:
    # One folder for every job, made before the first sbatch: with a folder per job
    # (``submitit/%j``) submitit makes it only once sbatch has answered, and a job HAL
    # starts within milliseconds, on a machine loaded by parallel tests, may open its
    # output there first and fail, as it would under Slurm.
    ex = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    ex.update_parameters(timeout_min=5, mem_gb=0.5, cpus_per_task=1)
    yield ex


def slurm_state(job: SlurmJob) -> str:
    """The State submitit reads from sacct, fetched now (``job.state`` may be cached)."""
    return job.watcher.get_state(job.job_id, mode="force")


def wait_for_state(job: SlurmJob, *states: str) -> str:
    wait_until(
        lambda: slurm_state(job).split(" ")[0] in states,
        WAIT,
        interval=0.5,
        message=f"job {job.job_id} to read {states} in sacct",
    )
    return slurm_state(job)


def wait_for_restart(hal: LiveServer, job_id: str) -> None:
    """Until HAL's record shows the job requeued and done, or ended without a requeue."""
    with hal.client() as client:

        def settled() -> bool:
            record = client.job(job_id)
            return record.state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") and (
                record.restarts >= 1 or record.state != "COMPLETED"
            )

        wait_until(settled, WAIT, interval=0.2, message=f"job {job_id} to be requeued and end")


def submit(script_or_wrap: Path | str, env: dict[str, str], cwd: Path, *extra: str) -> str:
    """``sbatch`` without --parsable, its id read with submitit's own regex."""
    argv = ["sbatch", *extra]
    argv += (
        [str(script_or_wrap)] if isinstance(script_or_wrap, Path) else ["--wrap", script_or_wrap]
    )
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return SlurmExecutor._get_job_id_from_submission_command(done.stdout)


# --- what the jobs run (pickled by value) ----------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


def explode(word: str) -> None:
    raise ValueError(f"exploded on {word}")


def wait_forever(ready: str) -> None:
    Path(ready).write_text("running")
    time.sleep(600)


def whoami() -> dict[str, object]:
    env = submitit.JobEnvironment()
    print(f"hello from rank {env.global_rank}", flush=True)
    return {
        "job_id": env.job_id,
        "global_rank": env.global_rank,
        "local_rank": env.local_rank,
        "num_tasks": env.num_tasks,
        "num_nodes": env.num_nodes,
        "node": env.node,
        "hostnames": list(env.hostnames),
    }


class Resumable(submitit.helpers.Checkpointable):
    """Its first run records progress, says it is running, and waits to be signalled;
    ``checkpoint`` (submitit's default) pickles this object with that progress, and the
    requeued run returns what it finds."""

    def __init__(self, ready: str) -> None:
        self.ready = ready
        self.starts = 0
        self.progress = ""

    def __call__(self) -> dict[str, object]:
        self.starts += 1
        if self.starts == 1:
            self.progress = "made in run 1"
            Path(self.ready).write_text("running")
            time.sleep(600)
        return {
            "starts": self.starts,
            "progress": self.progress,
            "restart_count": os.environ.get("SLURM_RESTART_COUNT"),
            "job_id": submitit.JobEnvironment().job_id,
        }


# --- submitit, unchanged ---------------------------------------------------------------


def test_submitted_function_returns_its_value_and_sacct_reads_completed(
    executor: submitit.AutoExecutor, hal_cluster: LiveServer
) -> None:
    job = executor.submit(add, 2, 40)
    assert job.job_id.isdigit(), job.job_id  # from "Submitted batch job N"
    assert job.result() == 42
    assert wait_for_state(job, "COMPLETED") == "COMPLETED"
    assert "Job completed successfully" in (job.stdout() or "")
    with hal_cluster.client() as client:
        assert client.job(job.job_id).state == "COMPLETED"


def test_exception_in_the_function_raises_failed_job_error(
    executor: submitit.AutoExecutor,
) -> None:
    job = executor.submit(explode, "xyzzy")
    with pytest.raises(FailedJobError, match="ValueError: exploded on xyzzy"):
        job.result()
    assert wait_for_state(job, "FAILED") == "FAILED"


def test_map_array_is_one_slurm_array_and_returns_every_result_in_order(
    executor: submitit.AutoExecutor, hal_cluster: LiveServer
) -> None:
    jobs = executor.map_array(add, [1, 2, 3], [10, 20, 30])
    array_id = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{array_id}_{i}" for i in range(3)]
    assert [j.result() for j in jobs] == [11, 22, 33]
    for job in jobs:
        assert wait_for_state(job, "COMPLETED") == "COMPLETED"
        assert job.paths.stdout.exists(), job.paths.stdout  # %A_%a in sbatch's and srun's
    with hal_cluster.client() as client:
        assert {client.job(j.job_id).array_job_id for j in jobs} == {int(array_id)}


def test_cancel_stops_a_running_job(
    executor: submitit.AutoExecutor, hal_cluster: LiveServer, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    job = executor.submit(wait_forever, str(ready))
    wait_until(ready.exists, WAIT, message="the function to run")
    job.cancel()  # scancel <id>
    assert wait_for_state(job, "CANCELLED").startswith("CANCELLED")
    assert job.done()
    with hal_cluster.client() as client:
        assert client.job(job.job_id).state == "CANCELLED"


@pytest.mark.parametrize(("nodes", "per_node"), [(1, 2), (2, 1)], ids=["1x2", "2x1"])
def test_every_task_of_a_multi_task_job_sees_its_rank(
    executor: submitit.AutoExecutor, nodes: int, per_node: int
) -> None:
    executor.update_parameters(nodes=nodes, tasks_per_node=per_node)
    job = executor.submit(whoami)
    results = job.results()  # one per task, from <id>_<task>_result.pkl
    assert [r["global_rank"] for r in results] == [0, 1]
    assert [r["local_rank"] for r in results] == ([0, 1] if per_node == 2 else [0, 0])
    assert [r["node"] for r in results] == ([0, 0] if nodes == 1 else [0, 1])
    hosts = ["node1"] if nodes == 1 else ["node1", "node2"]
    for r in results:
        assert (r["num_tasks"], r["num_nodes"], r["job_id"]) == (2, nodes, job.job_id)
        assert r["hostnames"] == hosts  # SLURM_JOB_NODELIST, node[1-2] expanded
    # srun --output <..>/%j_%t_log.out: each task's own file (srun writes a task on
    # another node's output as it relays it: it may come after the task's result)
    for rank in (0, 1):
        wait_until(
            lambda rank=rank: f"hello from rank {rank}" in (job.task(rank).stdout() or ""),
            WAIT,
            message=f"task {rank}'s line in its output file",
        )


def test_preempted_checkpointable_is_requeued_and_resumes_with_its_state(
    executor: submitit.AutoExecutor, hal_cluster: LiveServer, tmp_path: Path
) -> None:
    """job._interrupt(): scancel --signal SIGTERM, then USR2 (to the step only); submitit
    checkpoints and runs scontrol requeue; the same job id runs again (SLURM_RESTART_COUNT
    1) with the checkpointed object."""
    ready = tmp_path / "ready"
    job = executor.submit(Resumable(str(ready)))
    wait_until(ready.exists, WAIT, message="the first run")
    job._interrupt()
    wait_for_restart(hal_cluster, job.job_id)  # the requeued run's result, not run 1's
    assert job.result() == {
        "starts": 2,
        "progress": "made in run 1",
        "restart_count": "1",
        "job_id": job.job_id,
    }
    assert wait_for_state(job, "COMPLETED") == "COMPLETED"
    log = job.stdout() or ""
    assert log.count("Starting with JobEnvironment") == 2, log  # --open-mode=append


def test_requeue_from_inside_the_job_succeeds(
    executor: submitit.AutoExecutor, hal_cluster: LiveServer, tmp_path: Path
) -> None:
    """What submitit logs on Slurm: "Requeued job N (2 remaining timeouts)" then "Exiting
    gracefully"; its scontrol must not die, or submitit writes an error result for run 1."""
    ready = tmp_path / "ready"
    job = executor.submit(Resumable(str(ready)))
    wait_until(ready.exists, WAIT, message="the first run")
    job._interrupt()
    wait_for_restart(hal_cluster, job.job_id)
    log, errors = job.stdout() or "", job.stderr() or ""
    assert f"Requeued job {job.job_id} (2 remaining timeouts)" in log, errors[-3000:]
    assert "CalledProcessError" not in errors, errors[-3000:]


def test_time_limit_signal_checkpoints_and_requeues(
    executor: submitit.AutoExecutor, hal_cluster: LiveServer, tmp_path: Path
) -> None:
    """--time=1 --signal=USR2@55: USR2 reaches the task ~5 s in, once; submitit requeues."""
    executor.update_parameters(timeout_min=1, slurm_signal_delay_s=55)
    job = executor.submit(Resumable(str(tmp_path / "ready")))
    wait_for_restart(hal_cluster, job.job_id)
    assert job.result()["progress"] == "made in run 1"
    assert (job.stdout() or "").count("Caught signal SIGUSR2") == 1


# --- two Slurm mechanisms submitit relies on, alone ------------------------------------

STEP_TRAPS_USR2 = """\
import signal, sys, time
got = []
signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1)  # a second USR2 would land here
print(f"step got USR2 x{len(got)}", flush=True)
"""


def test_time_limit_signal_reaches_the_step_and_spares_the_batch_shell(
    slurm_env: dict[str, str], hal_cluster: LiveServer, tmp_path: Path
) -> None:
    """sbatch(1): "By default all job steps will be signaled, but not the batch shell
    itself" (B: signals only the shell)."""
    (tmp_path / "step.py").write_text(STEP_TRAPS_USR2)
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --time=1\n#SBATCH --signal=USR2@55\n"
        f"#SBATCH --output={tmp_path}/out.txt\n"
        f"srun {sys.executable} {tmp_path}/step.py\necho batch shell carried on\n"
    )
    job_id = submit(script, slurm_env, tmp_path)
    with hal_cluster.client() as client:
        wait_until(lambda: client.job(job_id).state_code not in ("PD", "R", "CG"), WAIT)
        record = client.job(job_id)
    out = (tmp_path / "out.txt").read_text()
    assert "step got USR2 x1" in out and "batch shell carried on" in out, (out, record)
    assert record.state == "COMPLETED", record


STEP_REQUEUES_ITS_JOB = """\
import os, signal, subprocess, sys
if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *_: None)  # as submitit's task bypasses it
rc = subprocess.call(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]])
with open(sys.argv[1], "a") as f:
    f.write(f"rc={rc}\\n")
"""


def test_scontrol_requeue_of_its_own_job_exits_0(
    slurm_env: dict[str, str], hal_cluster: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "step.py").write_text(STEP_REQUEUES_ITS_JOB)
    rc_file = tmp_path / "rc.txt"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --output={tmp_path}/out.txt\n"
        f"srun {sys.executable} {tmp_path}/step.py {rc_file}\n"
    )
    job_id = submit(script, slurm_env, tmp_path)
    wait_for_restart(hal_cluster, job_id)
    assert rc_file.read_text() == "rc=0\n"


# --- submitit's job handle on plain sbatch jobs (its polling, array ids and cancel) -----


def test_submitit_reads_hal_sacct_for_jobs_failures_and_array_elements(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """submitit's watcher (sacct -o JobID,State,NodeList --parsable2 -j ...) on jobs
    submitted by hand: COMPLETED, FAILED, and each element of an array as N_I."""
    ok = SlurmJob(tmp_path / "%j", submit("true", slurm_env, tmp_path))
    bad = SlurmJob(tmp_path / "%j", submit("exit 3", slurm_env, tmp_path))
    array_id = submit("true", slurm_env, tmp_path, "--array=0-2%3")
    elements = [SlurmJob(tmp_path / "%j", f"{array_id}_{i}") for i in range(3)]
    assert wait_for_state(ok, "COMPLETED") == "COMPLETED"
    assert wait_for_state(bad, "FAILED") == "FAILED"
    for element in elements:
        assert wait_for_state(element, "COMPLETED") == "COMPLETED"
        assert element.get_info(mode="cache")["NodeList"] in ("node1", "node2")


def test_submitit_cancel_of_a_running_job(
    slurm_env: dict[str, str], hal_cluster: LiveServer, tmp_path: Path
) -> None:
    job = SlurmJob(tmp_path / "%j", submit("sleep 300", slurm_env, tmp_path))
    with hal_cluster.client() as client:
        wait_until(lambda: client.job(job.job_id).state == "RUNNING", WAIT)
    job.cancel()  # scancel <id>
    assert wait_for_state(job, "CANCELLED").startswith("CANCELLED")
