"""What the Slurm commands print for situations only a real control plane makes, parsed
the way workflow tools parse it (reference §1.8). Nodes are registered through the agent
channel and nothing runs: on ``quick_timeout``'s server a node that never heartbeats is
"lost" after three seconds."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.testing import http
from hal.testing.live import LiveServer, wait_until

# psij-python 0.9.11's SlurmJobExecutor._REASONS_MAP: a FAILED job (F, NF, TO, OOM...)
# whose reason is not one of these makes its status thread raise AssertionError
PSIJ_REASONS = frozenset(
    {
        "AssociationJobLimit", "AssociationResourceLimit", "AssociationTimeLimit",
        "BadConstraints", "BeginTime", "Cleaning", "Dependency", "FrontEndDown",
        "InactiveLimit", "InvalidAccount", "InvalidQOS", "JobHeldAdmin", "JobHeldUser",
        "JobLaunchFailure", "Licenses", "NodeDown", "NonZeroExitCode", "PartitionDown",
        "PartitionInactive", "PartitionNodeLimit", "PartitionTimeLimit", "Priority", "Prolog",
        "QOSJobLimit", "QOSResourceLimit", "QOSTimeLimit", "ReqNodeNotAvail", "Reservation",
        "Resources", "SystemFailure", "TimeLimit", "QOSUsageThreshold", "WaitingForScheduling",
    }
)  # fmt: skip
PSIJ_STATUS = ["-O", "JobArrayID,StateCompact,Reason", "-t", "all", "--me"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # registered nodes never heartbeat here: keep them up for the whole module
    overrides = {"node_timeout_seconds": 600.0}
    with LiveServer(tmp_path_factory.mktemp("srv"), config_overrides=overrides) as live:
        yield live


@pytest.fixture
def queue(server: LiveServer) -> Iterator[LiveServer]:
    """The module's server, its queue emptied after the test: a job left pending behind
    a reservation would block its partition for the next test's jobs."""
    yield server
    assert slurm(server, "scancel", "--me")[0] == 0


@pytest.fixture
def quick_timeout(tmp_path: Path) -> Iterator[LiveServer]:
    overrides = {"node_timeout_seconds": 3.0, "heartbeat_interval_seconds": 0.5}
    with LiveServer(tmp_path / "srv", config_overrides=overrides) as live:
        yield live


def register(server: LiveServer, name: str) -> None:
    done = http.post(
        server.url + "/v1/agent/register",
        headers={"Authorization": f"Bearer {server.token}"},
        json={"node": name, "cpus": 2, "memory_bytes": 2**31},
        timeout=10,
    )
    assert done.status_code == 200, done.text


def slurm(server: LiveServer, command: str, *argv: str) -> tuple[int, str]:
    """Runs one Slurm command in this process against the live server: (rc, stdout)."""
    out = io.StringIO()
    rc = run(
        command,
        list(argv),
        client_factory=server.client,
        stdout=out,
        stderr=io.StringIO(),
        stdin=io.StringIO(""),
        environ={},
        cwd="/tmp",
    )
    return rc, out.getvalue()


def psij_columns(text: str) -> dict[str, list[str]]:
    """PSI/J's parse: skip the header, split each line on whitespace, assert 3 columns."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines()[1:]:
        if line:
            cols = line.split()
            assert len(cols) == 3, line
            rows[cols[0]] = cols
    return rows


def submit(server: LiveServer, tmp_path: Path, *options: str) -> str:
    done = server.cli("sbatch", "--parsable", *options, "--wrap", "sleep 100", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def reason_of(server: LiveServer, job_id: str) -> str:
    with server.client() as client:
        return client.job(job_id).reason


def state_of(server: LiveServer, job_id: str) -> str:
    with server.client() as client:
        return client.job(job_id).state


def test_a_lost_node_s_job_ends_with_slurm_s_reason(
    quick_timeout: LiveServer, tmp_path: Path
) -> None:
    """A --no-requeue job on a node that stops answering ends NODE_FAIL with Slurm's
    reason NodeDown (FAIL_DOWN_NODE): PSI/J checks a failed job's reason against Slurm's
    list and asserts, so any other word stops its status thread."""
    server = quick_timeout
    register(server, "lost1")
    job_id = submit(server, tmp_path, "--no-requeue", "-w", "lost1")
    wait_until(lambda: state_of(server, job_id) == "NODE_FAIL", timeout=120, message="NODE_FAIL")
    rc, out = slurm(server, "squeue", *PSIJ_STATUS)
    assert rc == 0
    assert psij_columns(out)[job_id] == [job_id, "NF", "NodeDown"]
    assert set(psij_columns(out)[job_id][2:]) <= PSIJ_REASONS
    rc, out = slurm(server, "sacct", "-X", "-P", "-n", "-j", job_id, "-o", "State,Reason")
    assert out == "NODE_FAIL|NodeDown\n"


def test_a_reason_with_a_description_prints_as_slurm_s(queue: LiveServer, tmp_path: Path) -> None:
    """A job kept off a node by a MAINT reservation waits with Slurm's reason
    ReqNodeNotAvail and the description "ReqNodeNotAvail, Reserved for maintenance".
    Only %R shows the description as it is; the reason columns (%r, -O Reason, --json's
    state_reason) show the one-word reason, and scontrol writes the
    description's spaces as underscores, as Slurm does "for easier parsing": PSI/J
    asserts 3 whitespace-separated columns per line of its squeue, and Key=Value readers
    split scontrol's lines on whitespace."""
    server = queue
    register(server, "maint1")
    rc, _ = slurm(
        server, "scontrol", "create", "reservation", "ReservationName=fix", "StartTime=now",
        "Duration=60", "Nodes=maint1", "Users=root", "Flags=MAINT",
    )  # fmt: skip
    assert rc == 0
    job_id = submit(server, tmp_path, "-w", "maint1")
    wait_until(
        lambda: reason_of(server, job_id).startswith("ReqNodeNotAvail"),
        timeout=30,
        message="the maintenance reason",
    )
    rc, out = slurm(server, "squeue", *PSIJ_STATUS)
    assert psij_columns(out)[job_id] == [job_id, "PD", "ReqNodeNotAvail"]
    rc, out = slurm(server, "squeue", "-h", "-j", job_id, "-o", "%i|%r|%R")
    assert out == f"{job_id}|ReqNodeNotAvail|(ReqNodeNotAvail, Reserved for maintenance)\n"
    rc, out = slurm(server, "scontrol", "show", "job", job_id)
    assert "Reason=ReqNodeNotAvail,_Reserved_for_maintenance" in out.split()
    assert all("=" in word for word in out.split())
    rc, out = slurm(server, "squeue", "--json", "-j", job_id)
    [shown] = json.loads(out)["jobs"]
    assert shown["state_reason"] == "ReqNodeNotAvail"
    assert shown["state_description"] == "ReqNodeNotAvail, Reserved for maintenance"


def test_sbatch_quiet_prints_no_submitted_line(queue: LiveServer, tmp_path: Path) -> None:
    """``sbatch -Q`` suppresses "informational messages from sbatch such as Job ID"
    (sbatch.1): a script that quiets it gets no line; the job is submitted all the same.
    ``--parsable`` asks for the id, so it is still printed."""
    server = queue
    quiet = server.cli("sbatch", "-Q", "-J", "hush", "-H", "--wrap", "true", cwd=tmp_path)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    both = server.cli(
        "sbatch", "-Q", "--parsable", "-J", "hush", "-H", "--wrap", "true", cwd=tmp_path
    )
    assert both.stdout.strip().isdigit()
    with server.client() as client:
        assert len(client.jobs(names=["hush"])) == 2


def test_squeue_nodelist_shows_the_jobs_on_those_nodes(queue: LiveServer, tmp_path: Path) -> None:
    """``squeue -w node`` (``--nodelist``, a host list) is how an administrator asks what
    runs on a node before draining it; a pending job is on no node."""
    server = queue
    register(server, "w1")
    register(server, "w2")
    on_w1 = submit(server, tmp_path, "-w", "w1")
    on_w2 = submit(server, tmp_path, "-w", "w2")
    waiting = submit(server, tmp_path, "-w", "w1", "-H")
    wait_until(
        lambda: {state_of(server, on_w1), state_of(server, on_w2)} == {"RUNNING"},
        timeout=30,
        message="both jobs to start",
    )
    rc, out = slurm(server, "squeue", "-h", "-w", "w1", "-o", "%i %N")
    assert (rc, out) == (0, f"{on_w1} w1\n")
    rc, out = slurm(server, "squeue", "-h", "--nodelist=w[1-2]", "-o", "%i", "--sort=i")
    assert out.split() == [on_w1, on_w2]
    assert waiting not in out.split()


def test_squeue_shows_the_output_files_and_het_fields(queue: LiveServer, tmp_path: Path) -> None:
    """``-O STDOUT,STDERR`` (where is my log), the het job fields, tasks and CPUs per task,
    and the -o letters %h %v: each was refused as unsupported, failing the script."""
    server = queue
    out = str(tmp_path / "log-%j.txt")
    plain = submit(server, tmp_path, "-H", "-n2", "-c1", "-o", out)
    het = submit(server, tmp_path, "-H", "-n1", ":", "-n1")
    fields = "JobID:4 ,STDOUT:0 ,STDERR:0 ,NumTasks:2 ,cpus-per-task:2"
    rc, shown = slurm(server, "squeue", "-h", "-j", plain, "-O", fields)
    log = f"{tmp_path}/log-{plain}.txt"
    assert (rc, shown) == (0, f"{plain:<4} {log} {log} 2  1 \n")
    fields = "JobID:4 ,HetJobID:4 ,HetJobOffset:4 ,HetJobIDSet"
    rc, shown = slurm(server, "squeue", "-h", "--sort=i", "-j", f"{plain},{het}", "-O", fields)
    first, second = int(het), int(het) + 1
    assert shown.split() == [
        plain, "N/A", "N/A", "N/A",
        het, het, "0", f"{first}-{second}",
        str(second), het, "1", f"{first}-{second}",
    ]  # fmt: skip
    rc, shown = slurm(server, "squeue", "-h", "-j", plain, "-o", "%i %h %v")
    assert (rc, shown) == (0, f"{plain} OK (null)\n")


def test_a_signal_to_an_ended_or_unknown_job_is_an_error(queue: LiveServer, tmp_path: Path) -> None:
    """scancel -s SIG / -b of a job that has ended (or never was): Slurm 22.05.8's scancel
    says 'Invalid job id specified' and exits 1 (HAL: silent, 0); -Q keeps it quiet, and
    a plain scancel of it stays silent, as Slurm's."""
    server = queue
    job = server.cli("sbatch", "--parsable", "-H", "--wrap", "true", cwd=tmp_path).stdout.strip()
    assert server.cli("scancel", job).returncode == 0  # (a held job: CANCELLED at once)
    for args in (["-s", "HUP", job], ["-b", job], ["-s", "USR1", "99999"]):
        done = server.cli("scancel", *args)
        target = args[-1]
        assert done.returncode == 1, args
        assert done.stderr == (
            f"scancel: error: Kill job error on job id {target}: Invalid job id specified\n"
        )
    quiet = server.cli("scancel", "-Q", "-s", "HUP", job)
    assert (quiet.returncode, quiet.stderr) == (0, "")
    plain = server.cli("scancel", job)
    assert (plain.returncode, plain.stderr) == (0, "")
