"""``srun`` inside a batch job: a pass-through that runs the command once per task.

HAL has no job steps yet, so this is deliberately small and says so: inside a job
(``SLURM_JOB_ID`` set) ``srun [options] CMD ARGS`` starts CMD ``--ntasks`` times on this
node with ``SLURM_PROCID``/``SLURM_LOCALID`` set per task and exits with the highest exit
code. Workflow tools that wrap their in-job command in ``srun -n1 ...`` (Snakemake's Slurm
executor does) work unchanged. Outside a job it refuses: interactive allocation and MPI
launch across nodes are not implemented.
"""

from __future__ import annotations

import os
import subprocess

from hal.compat.seam import Console

# options whose value is consumed and honoured or harmlessly ignored in a pass-through
_WITH_VALUE = {
    "-n": "ntasks",
    "--ntasks": "ntasks",
    "-N": "nodes",
    "--nodes": "nodes",
    "-c": "cpus",
    "--cpus-per-task": "cpus",
    "--cpu-bind": "",
    "--mem": "",
    "--mem-per-cpu": "",
    "-J": "",
    "--job-name": "",
    "--export": "",
    "--mpi": "",
    "--ntasks-per-node": "",
    "--gpus": "",
    "--gres": "",
    "-t": "",
    "--time": "",
}
_FLAGS = {
    "-l",
    "--label",
    "-u",
    "--unbuffered",
    "--exclusive",
    "-K",
    "--kill-on-bad-exit",
    "-Q",
    "--quiet",
    "--overlap",
    "--exact",
}


def srun(argv: list[str], console: Console) -> int:
    if "SLURM_JOB_ID" not in console.environ:
        return console.error(
            "HAL's srun runs a command inside a batch job only (no interactive allocations "
            "or multi-node MPI launch yet); submit the work with `hal sbatch`"
        )
    ntasks = 1
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if not arg.startswith("--") and len(arg) > 2 and arg[:2] in _WITH_VALUE:
            name, eq, value = arg[:2], "=", arg[2:]  # -n1, -c4
        if name in _WITH_VALUE:
            if not eq:
                i += 1
                if i >= len(argv):
                    return console.error(f"option {name} needs a value")
                value = argv[i]
            if _WITH_VALUE[name] == "ntasks":
                if not value.isdigit() or int(value) < 1:
                    return console.error(f"invalid --ntasks {value!r}")
                ntasks = int(value)
            elif _WITH_VALUE[name] == "nodes" and value.split("-")[0] not in ("1", ""):
                return console.error("HAL's srun runs on the batch node only (--nodes=1)")
        elif arg not in _FLAGS:
            return console.error(f"unrecognized option '{arg}': HAL's srun does not support it")
        i += 1
    command = argv[i:]
    if not command:
        return console.error("no command to run")
    if ntasks == 1:
        # one task: become the command, so the job's memory limit holds the command alone
        # (a Python srun waiting beside it would take ~50 MB of the job's allowance)
        env = {
            **console.environ,
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "SLURM_STEP_NUM_TASKS": "1",
        }
        console.close()
        console.stdout.flush()
        console.stderr.flush()
        try:
            os.chdir(console.cwd)
            os.execvpe(command[0], command, env)  # noqa: S606 - srun runs what it is given
        except OSError as err:
            return console.error(f"cannot run {command[0]}: {err.strerror}")
    procs = []
    for rank in range(ntasks):
        env = {
            **console.environ,
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_STEP_NUM_TASKS": str(ntasks),
        }
        try:
            procs.append(subprocess.Popen(command, env=env, cwd=console.cwd))
        except OSError as err:
            for p in procs:
                p.kill()
            return console.error(f"cannot run {command[0]}: {err.strerror}")
    codes = [p.wait() for p in procs]
    return max((c if c >= 0 else 128 - c) for c in codes)
