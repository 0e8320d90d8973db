"""sacct's job fields from a real server and agent: who ran the job and under which group,
the cluster's name, the limit in minutes, the time it was suspended, its WCKey, its batch
step's CPU time per task and the time it waited once eligible."""

from __future__ import annotations

import grp
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

FIELDS = (
    "JobID,UID,GID,Group,Cluster,TimelimitRaw,Suspended,WCKey,AveCPU,MinCPUNode,MinCPUTask,"
    "Reserved,ResvCPURAW"
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(
        tmp_path_factory.mktemp("hal"),
        config_overrides={"kill_wait_seconds": 1, "cluster_name": "halsacct"},
    )
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def _passwd(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def test_a_suspended_jobs_fields_in_sacct(live: LiveServer, tmp_path: Path) -> None:
    """A job that spins a CPU for a second, suspended for about two seconds: sacct's job
    line names its user's numbers and group, the cluster, its limit (90 s: 2 minutes),
    its time suspended and its WCKey; its batch step the suspension and its one task's
    CPU time on its node."""
    burn = f"{sys.executable} -c 'import time\nwhile time.process_time() < 1: pass'; sleep 3"
    argv = ("sbatch", "--parsable", "-t", "1:30", "--wckey=wk1", "--wrap", burn)
    done = live.cli(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    with live.client() as c:
        wait_until(lambda: c.job(job_id).state == "RUNNING", message="the job to start")
        assert live.cli("scontrol", "suspend", job_id).returncode == 0
        wait_until(lambda: c.job(job_id).suspended_seconds >= 2, message="two seconds")
        assert live.cli("scontrol", "resume", job_id).returncode == 0
        wait_until(lambda: c.job(job_id).end_time is not None, message="the job to end")
        info = c.job(job_id)
    sa = live.cli("sacct", "-n", "-P", "-j", job_id, "-o", FIELDS)
    assert sa.returncode == 0, sa.stderr
    job_line, batch_line = (line.split("|") for line in sa.stdout.split())
    # the server's user, as this machine's user database names it (the test server's
    # "admin" is none of its users: no numbers, as sacct -u refuses the name)
    user = _passwd(info.user)
    ids = [str(user.pw_uid), str(user.pw_gid), grp.getgrgid(user.pw_gid).gr_name] if user else []
    assert job_line[:6] == [job_id, *(ids or ["", "", ""]), "halsacct", "2"]
    suspended = job_line[6]
    assert suspended.startswith("00:00:0") and int(suspended[-2:]) >= 2, sa.stdout
    assert job_line[7:11] == ["wk1", "", "", ""]  # the CPU time is its batch step's
    assert job_line[11].startswith("00:00:") and job_line[12].isdigit()  # it waited little
    assert batch_line[:8] == [f"{job_id}.batch", "", "", "", "halsacct", "", suspended, ""]
    assert batch_line[8] in ("00:00:01", "00:00:02"), sa.stdout
    assert batch_line[9:] == ["node1", "0", "", ""]
