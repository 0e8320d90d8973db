"""The exact invocations workflow tools make, and the exact text they parse.

Each test names the tool and what it does with the output (reference §1.8); breaking one
of these breaks that tool for every user who switches to HAL.
"""

from __future__ import annotations

import re

from compat_fakes import T0, FakeClient, call, job, running

from hal.core.states import STATE_CODES

JOBS = [
    job(5),
    running(6, user="alice"),
    job(7, state="COMPLETED", reason="None", start_time=T0, end_time=T0 + 9, nodes=["vm"]),
    job(
        8,
        state="FAILED",
        reason="NonZeroExitCode",
        exit_code=2,
        start_time=T0,
        end_time=T0 + 9,
        nodes=["vm"],
    ),
    job(
        9,
        state="TIMEOUT",
        reason="TimeLimit",
        exit_signal=15,
        start_time=T0,
        end_time=T0 + 60,
        nodes=["vm"],
    ),
    job(12, array_job_id=11, array_task_id=0, reason="Priority"),
    job(13, array_job_id=11, array_task_id=1, reason="Priority"),
]


def test_parsl_submit_regex() -> None:
    """Parsl: `Submitted batch job (?P<id>\\S*)` on sbatch's stdout."""
    out = call(FakeClient(), "sbatch", "--wrap", "true").out
    m = re.search(r"Submitted batch job (?P<id>\S*)", out)
    assert m is not None and m.group("id") == "42"


def test_parsl_status_poll() -> None:
    """Parsl: `squeue --noheader --format='%i %t' --job '<ids>'`; a missing job is taken as
    COMPLETED, so missing ids must not fail the whole call."""
    result = call(
        FakeClient(job_list=JOBS), "squeue", "--noheader", "--format=%i %t", "--job", "5,6,999"
    )
    assert result.rc == 0
    assert result.lines == ["5 PD", "6 R"]


def test_nextflow_status_poll() -> None:
    """Nextflow: `squeue --noheader -o '%i %t' -t all -p <q> -u <user>`; two-letter codes."""
    result = call(
        FakeClient(job_list=JOBS),
        "squeue",
        "--noheader",
        "-o",
        "%i %t",
        "-t",
        "all",
        "-p",
        "debug",
        "-u",
        "root",
    )
    assert result.rc == 0
    pairs = dict(line.split() for line in result.lines)
    assert pairs == {"5": "PD", "7": "CD", "8": "F", "9": "TO", "11_[0-1]": "PD"}


def test_nextflow_submit_directives() -> None:
    """Nextflow writes `--no-requeue` and `--signal B:USR2@30` in its #SBATCH header and
    parses `Submitted batch job (\\d+)`."""
    client = FakeClient()
    script = (
        "#!/bin/bash\n#SBATCH -J nf-task\n#SBATCH -o /w/.command.log\n#SBATCH --no-requeue\n"
        "#SBATCH --signal B:USR2@30\n#SBATCH -c 2\n#SBATCH -t 01:00:00\n#SBATCH --mem 2048M\n"
        "#SBATCH -p debug\nbash .command.run\n"
    )
    result = call(client, "sbatch", stdin=script)
    assert re.search(r"Submitted batch job (\d+)", result.out)
    sub = client.submitted[0]
    assert (sub.requeue, sub.signal, sub.cpus_per_task) == (False, "B:USR2@30", 2)
    assert (sub.time_limit_seconds, sub.memory_per_node_bytes) == (3600, 2048 << 20)


def test_psij_status_columns() -> None:
    """PSI/J 0.9.11: `squeue -O JobArrayID,StateCompact,Reason -t all --me`; skips the
    header, splits on whitespace, asserts exactly 3 columns and a known state code."""
    result = call(
        FakeClient(job_list=JOBS),
        "squeue",
        "-O",
        "JobArrayID,StateCompact,Reason",
        "-t",
        "all",
        "--me",
    )
    assert result.rc == 0
    header, *rows = result.lines
    assert header.split() == ["JOBID", "ST", "REASON"]
    # --me drops alice's job 6; the array's two pending elements fold into one line
    assert [row.split()[0] for row in rows] == ["5", "11_[0-1]", "7", "8", "9"]
    known = set(STATE_CODES.values())
    for row in rows:
        cols = row.split()
        assert len(cols) == 3, row
        assert cols[1] in known
    failed = [row.split() for row in rows if row.split()[1] == "F"]
    assert failed == [["8", "F", "NonZeroExitCode"]]


def test_psij_list_and_cancel() -> None:
    """PSI/J lists with `squeue --me -o %i -h -r -t all` and cancels with `scancel -Q`."""
    client = FakeClient(job_list=JOBS)
    listed = call(client, "squeue", "--me", "-o", "%i", "-h", "-r", "-t", "all").lines
    assert "11_0" in listed and "11_1" in listed
    quiet = call(client, "scancel", "-Q", "404")
    assert (quiet.rc, quiet.out, quiet.err) == (0, "", "")


def test_snakemake_submit() -> None:
    """Snakemake's submit string; it reads the bare id printed by --parsable."""
    client = FakeClient()
    result = call(
        client,
        "sbatch",
        "--parsable",
        "--job-name",
        "uuid-1",
        "--output",
        "/log/%j.log",
        "--export=ALL",
        "--comment",
        "rule_a",
        "-A",
        "proj",
        "-p",
        "debug",
        "-t",
        "60",
        "--mem",
        "1000",
        "--ntasks",
        "1",
        "--cpus-per-task",
        "2",
        "-D",
        "/work",
        "--wrap",
        "python run.py",
        environ={"PATH": "/bin"},
    )
    assert (result.rc, result.out) == (0, "42\n")
    sub = client.submitted[0]
    assert (sub.name, sub.workdir, sub.environment["PATH"]) == ("uuid-1", "/work", "/bin")
    assert sub.environment["SLURM_SUBMIT_DIR"] == "/home/root"  # where sbatch ran, not -D


def test_snakemake_sacct_poll() -> None:
    """`sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State --starttime
    ... --endtime now --name <uuid>`: `id|STATE` lines, full state names."""
    jobs = [j.model_copy(update={"name": "uuid-1", "user": "root"}) for j in JOBS]
    result = call(
        FakeClient(job_list=jobs),
        "sacct",
        "-X",
        "--parsable2",
        "--clusters",
        "all",
        "--noheader",
        "--format=JobIdRaw,State",
        "--starttime",
        "2026-11-19T21:00",
        "--endtime",
        "now",
        "--name",
        "uuid-1",
    )
    assert result.rc == 0
    assert result.lines == [
        "5|PENDING",
        "6|RUNNING",
        "7|COMPLETED",
        "8|FAILED",
        "9|TIMEOUT",
        "12|PENDING",
        "13|PENDING",
    ]


def test_snakemake_squeue_poll() -> None:
    """`squeue --format=%i|%T --states=all --noheader --name <uuid>`."""
    jobs = [j.model_copy(update={"name": "uuid-1"}) for j in JOBS[:4]]
    result = call(
        FakeClient(job_list=jobs),
        "squeue",
        "--format=%i|%T",
        "--states=all",
        "--noheader",
        "--name",
        "uuid-1",
    )
    assert sorted(result.lines) == ["5|PENDING", "6|RUNNING", "7|COMPLETED", "8|FAILED"]


def test_snakemake_min_job_age() -> None:
    """Snakemake reads MinJobAge from `scontrol show config`."""
    lines = call(FakeClient(min_job_age=600), "scontrol", "show", "config").lines
    (line,) = [entry for entry in lines if entry.startswith("MinJobAge")]
    assert re.match(r"MinJobAge\s+= 600 sec$", line)


def test_dask_jobqueue_header() -> None:
    """dask-jobqueue's SLURMCluster header; it finds the id with `(?P<job_id>\\d+)`."""
    client = FakeClient()
    script = (
        "#!/usr/bin/env bash\n\n#SBATCH -J dask-worker\n#SBATCH -e /tmp/dask-worker-%J.err\n"
        "#SBATCH -o /tmp/dask-worker-%J.out\n#SBATCH -p debug\n#SBATCH -A proj\n#SBATCH -n 1\n"
        "#SBATCH --cpus-per-task=4\n#SBATCH --mem=15G\n#SBATCH -t 00:30:00\n"
        "JOB_ID=${SLURM_JOB_ID%;*}\n\npython -m distributed.cli.dask_worker tcp://h:8786\n"
    )
    result = call(client, "sbatch", stdin=script)
    assert re.search(r"(?P<job_id>\d+)", result.out)
    sub = client.submitted[0]
    assert (sub.name, sub.ntasks, sub.cpus_per_task) == ("dask-worker", 1, 4)
    assert (sub.memory_per_node_bytes, sub.time_limit_seconds) == (15 << 30, 1800)
    assert sub.stderr == "/tmp/dask-worker-%J.err"


def test_parsl_header() -> None:
    """Parsl's SlurmProvider header (`--mem=<N>g`, --exclusive, --constraint, --qos)."""
    client = FakeClient()
    script = (
        "#!/bin/bash\n#SBATCH --job-name=parsl.block-0\n#SBATCH --output=/r/0.stdout\n"
        "#SBATCH --error=/r/0.stderr\n#SBATCH --nodes=1\n#SBATCH --time=10\n"
        "#SBATCH --ntasks-per-node=1\n#SBATCH --exclusive\n#SBATCH --partition=debug\n"
        "#SBATCH --account=proj\n#SBATCH --qos=normal\n#SBATCH --constraint=knl\n"
        "#SBATCH --mem=4g\n#SBATCH --cpus-per-task=2\nexport JOBNAME=parsl\n"
    )
    assert call(client, "sbatch", stdin=script).rc == 0
    sub = client.submitted[0]
    assert sub.exclusive and sub.constraint == ["knl"] and sub.memory_per_node_bytes == 4 << 30
