"""``scontrol reconfigure``: an administrator edits hal.toml and the running server takes
it, as slurmctld re-reads slurm.conf, without a restart and without losing a job. A new
partition appears in sinfo and runs jobs; a lower MaxTime keeps a pending job pending on
PartitionTimeLimit while a running one runs on; a file with a mistake, or one that
removes a partition jobs still use, changes nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.client import HalClient
from hal.core.errors import HalError
from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until

HAL = (sys.executable, "-m", "hal.cli.main")

BEFORE = """\
min_job_age_seconds = 300
kill_wait_seconds = 2

[[partitions]]
name = "debug"
default = true
nodes = "node1"
max_time = 60
"""

AFTER = """\
min_job_age_seconds = 120
kill_wait_seconds = 2
cluster_name = "renamed"

[priority]
weight_partition = 1000

[[partitions]]
name = "debug"
default = true
nodes = "node1"
max_time = 20

[mail]
domain = "example.org"

[[partitions]]
name = "extra"
nodes = "node2"
max_time = 30
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    toml = tmp_path / "hal.toml"
    toml.write_text(BEFORE)
    server = LiveServer(tmp_path / "state", config_file=toml)
    with server, server.agents(2, cpus=1, memory="1G"):
        yield server


def _sbatch(server: LiveServer, cwd: Path, *args: str) -> int:
    out = server.cli("sbatch", "--parsable", *args, "--wrap", "sleep 300", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _toml(server: LiveServer) -> Path:
    assert server.config_file is not None
    return server.config_file


def test_reconfigure_adds_a_partition_and_lowers_max_time(live: LiveServer, tmp_path: Path) -> None:
    """The job running on node1 asked 50 minutes and runs on under the new 20-minute
    MaxTime (Slurm does not end running jobs at a reconfigure); the pending one that
    asked 30 now waits on PartitionTimeLimit; node2, in no partition before, takes a
    job of the new partition at once; show config, show partition, sinfo and sprio (the
    new [priority] weight) show the new values; cluster_name is reported as kept."""
    running = _sbatch(live, tmp_path, "-t", "50")
    with live.client() as c:
        wait_until(lambda: c.job(running).state == "RUNNING", message="the running job")
        waiting = _sbatch(live, tmp_path, "-t", "30")
        wait_until(lambda: c.job(waiting).reason == "Resources", message="Resources")
        assert "extra" in live.cli("sbatch", "-p", "extra", "--wrap", "true").stderr
        _toml(live).write_text(AFTER)
        done = live.cli("scontrol", "reconfigure")
        assert done.returncode == 0, done.stderr
        assert "reconfigure: cluster_name changes only at restart; kept" in done.stderr
        wait_until(
            lambda: c.job(waiting).reason == "PartitionTimeLimit",
            message="the pending job to wait on PartitionTimeLimit",
        )
        assert c.job(running).state == "RUNNING"
        assert c.job(waiting).state == "PENDING"
        sinfo = live.cli("sinfo", "-h", "-o", "%P %l %N")
        assert sinfo.stdout.split("\n")[:2] == ["debug* 20:00 node1", "extra 30:00 node2"]
        shown = live.cli("scontrol", "show", "partition", "debug").stdout
        assert "MaxTime=00:20:00" in shown
        sprio = live.cli("sprio", "-h", "-o", "%i %Y %P")
        assert sprio.stdout.split() == [str(waiting), "1000", "1000"]  # the new weight
        config = live.cli("scontrol", "show", "config").stdout
        assert "MinJobAge               = 120 sec" in config
        assert "ClusterName             = hal" in config
        assert "MailDomain              = example.org" in config
        extra = _sbatch(live, tmp_path, "-p", "extra", "-t", "5")
        wait_until(lambda: c.job(extra).state == "RUNNING", message="the job in extra")
        assert c.job(extra).nodes == ["node2"]
        events = [e for e in c.events(follow=False) if e.kind == "config.reconfigured"]
        assert len(events) == 1
        changed = events[0].data["changed"]
        assert isinstance(changed, list)
        assert "partitions.extra" in changed and "partitions.debug.max_time" in changed
        assert events[0].data["kept"] == ["cluster_name"]
        for job in (running, waiting, extra):
            c.cancel(str(job))


def test_a_file_with_a_mistake_changes_nothing(live: LiveServer, tmp_path: Path) -> None:
    """A typo in the edited file: the command prints the same FILE: key: what-to-write
    error that `hal server` prints at start, exits 1, and the server keeps its
    configuration (the partition's MaxTime stays 60 minutes)."""
    _toml(live).write_text(AFTER.replace("max_time = 20", 'max_time = "twenty"'))
    done = live.cli("scontrol", "reconfigure")
    assert done.returncode == 1
    assert f"{_toml(live)}: partitions[0].max_time: 'twenty' is not a time limit" in done.stderr
    assert "write minutes (60)" in done.stderr
    sinfo = live.cli("sinfo", "-h", "-o", "%P %l")
    assert sinfo.stdout.strip() == "debug* 1:00:00"
    assert live.cli("sprio", "-h", "-o", "%i").stdout == ""  # [priority] not taken
    with live.client() as c:
        assert not [e for e in c.events(follow=False) if e.kind == "config.reconfigured"]


def test_removing_a_partition_jobs_use_is_refused(live: LiveServer, tmp_path: Path) -> None:
    """A partition that a pending job waits in cannot go: the command names the job and
    changes nothing (not even the other edits); once the job is gone it can."""
    _toml(live).write_text(AFTER)
    assert live.cli("scontrol", "reconfigure").returncode == 0
    job = _sbatch(live, tmp_path, "-p", "extra", "-t", "5", "--hold")
    _toml(live).write_text(BEFORE.replace("max_time = 60", "max_time = 45"))
    done = live.cli("scontrol", "reconfigure")
    assert done.returncode == 1
    assert f"partition extra is in use by job(s) {job}" in done.stderr
    assert live.cli("sinfo", "-h", "-o", "%P %l").stdout.split("\n")[:2] == [
        "debug* 20:00",
        "extra 30:00",
    ]
    with live.client() as c:
        c.cancel(str(job))
    done = live.cli("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr
    assert live.cli("sinfo", "-h", "-o", "%P %l").stdout.strip() == "debug* 45:00"


WITH_QOS = (
    BEFORE
    + """
[[qos]]
name = "limited"
max_jobs_per_user = 1

[[qos]]
name = "high"

[[accounts]]
name = "chem"

[[accounts]]
name = "physics"
"""
)


def test_removing_a_qos_or_an_account_jobs_use_is_refused(live: LiveServer, tmp_path: Path) -> None:
    """A held job of QoS limited and account chem: a file without that QoS, or without
    that account, is refused naming the job, and nothing changes (the job keeps its
    limits); once the job is gone both can go. (Before, the job ran with neither.)"""
    _toml(live).write_text(WITH_QOS)
    assert live.cli("scontrol", "reconfigure").returncode == 0
    job = _sbatch(live, tmp_path, "--qos=limited", "-A", "chem", "--hold")
    no_qos = WITH_QOS.replace('[[qos]]\nname = "limited"\nmax_jobs_per_user = 1\n', "")
    no_chem = WITH_QOS.replace('[[accounts]]\nname = "chem"\n', "")
    for text, named in ((no_qos, "QoS limited"), (no_chem, "account chem (of user admin)")):
        assert text != WITH_QOS
        _toml(live).write_text(text.replace("max_time = 60", "max_time = 45"))
        done = live.cli("scontrol", "reconfigure")
        assert done.returncode == 1
        assert f"{named} is in use by job(s) {job}. Nothing was changed" in done.stderr
        assert live.cli("sinfo", "-h", "-o", "%l").stdout.strip() == "1:00:00"
    assert "limited" in live.cli("sacctmgr", "-n", "-P", "show", "qos", "format=name").stdout
    with live.client() as c:
        c.cancel(str(job))
    _toml(live).write_text(
        no_chem.replace('[[qos]]\nname = "limited"\nmax_jobs_per_user = 1\n', "")
    )
    done = live.cli("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr


def test_a_partition_whose_nodes_never_registered_is_taken_with_a_warning(
    live: LiveServer, tmp_path: Path
) -> None:
    """A typo in a partition's nodes (nod[1-2]): reconfigure takes it (nodes may join
    later) but says that none has registered, and a job in it says why it waits."""
    _toml(live).write_text(BEFORE.replace('nodes = "node1"', 'nodes = "nod[1-2]"'))
    done = live.cli("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr
    assert "reconfigure: partition debug names nod[1-2], and no such node has registered" in (
        done.stderr
    )
    job = _sbatch(live, tmp_path, "-t", "5")
    with live.client() as c:
        wait_until(lambda: c.job(job).reason == "BadConstraints", message="BadConstraints")
        assert "partition debug has no nodes" in c.explain(job).detail
        c.cancel(str(job))
    _toml(live).write_text(BEFORE)
    done = live.cli("scontrol", "reconfigure")
    assert done.returncode == 0 and done.stderr == ""


def test_only_an_administrator_may_reconfigure(live: LiveServer) -> None:
    token = live.add_users("alice")["alice"]
    _toml(live).write_text(AFTER)
    done = live.cli("scontrol", "reconfigure", token=token)
    assert done.returncode == 1
    assert "user alice is not an administrator" in done.stderr
    assert "extra" not in live.cli("sinfo", "-h", "-o", "%P").stdout


def test_the_slurmrest_facade_reconfigures_for_an_administrator(live: LiveServer) -> None:
    """slurmrestd's ``GET /reconfigure/``: an administrator's takes the file and warns
    about what waits for a restart; a user's is refused with ACCESS_DENIED."""
    base = f"{live.url}/slurm/v0.0.45/reconfigure/"
    token = live.add_users("bob")["bob"]
    _toml(live).write_text(AFTER)
    refused = http.get(base, headers={"X-SLURM-USER-TOKEN": token}, timeout=30)
    assert refused.status_code == 500  # slurmctld's refusals are 500 (slurm-checks.md)
    assert refused.json()["errors"][0]["error_number"] == 2002  # ESLURM_ACCESS_DENIED
    assert "not an administrator" in refused.json()["errors"][0]["description"]
    done = http.get(base, headers={"X-SLURM-USER-TOKEN": live.token}, timeout=30)
    assert done.status_code == 200, done.text
    assert done.json()["errors"] == []
    assert [w["source"] for w in done.json()["warnings"]] == ["cluster_name"]
    assert "extra" in live.cli("sinfo", "-h", "-o", "%P").stdout
    _toml(live).write_text("nonsense = 1\n")
    bad = http.get(base, headers={"X-SLURM-USER-TOKEN": live.token}, timeout=30)
    assert bad.status_code == 500
    assert "unknown key(s) ['nonsense']" in bad.json()["errors"][0]["description"]


def test_sighup_to_hal_server_reconfigures_it(tmp_path: Path) -> None:
    """An administrator edits DATA_DIR/hal.toml and sends `hal server` SIGHUP (as
    `kill -HUP $(pidof slurmctld)`): the server takes the file and keeps serving; a file
    with a mistake is refused in the log and changes nothing."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "hal.toml").write_text(BEFORE)
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*HAL, "server", "--data-dir", str(state), "--port", str(port), "--init-admin", "x"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # a server's start on a loaded machine (a parallel run) may take a while
        wait_until(lambda: "token (shown once): " in log.read_text(), 90, message="the token")
        token = log.read_text().split("token (shown once): ")[1].split()[0]
        with HalClient(f"http://127.0.0.1:{port}", token) as c:
            wait_until(lambda: _answers(c), message="the server")
            (state / "hal.toml").write_text(AFTER)
            proc.send_signal(signal.SIGHUP)
            wait_until(
                lambda: [p.name for p in c.partitions()] == ["debug", "extra"],
                message="the new partition",
            )
            assert c.cluster_config().min_job_age_seconds == 120
            (state / "hal.toml").write_text(AFTER.replace("[[partitions]]", "[[partition]]"))
            proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "reconfigure (SIGHUP) refused" in log.read_text(), message="log")
            assert "unknown key(s) ['partition']" in log.read_text()
            assert [p.name for p in c.partitions()] == ["debug", "extra"]
            assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(20)


def _answers(client: HalClient) -> bool:
    try:
        client.partitions()
    except HalError:
        return False
    return True


def test_reconfigure_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    """The same on PostgreSQL, where the event's data is a JSON column: stored, and the
    new partition shown."""
    toml = tmp_path / "hal.toml"
    toml.write_text(BEFORE)
    with LiveServer(tmp_path / "state", db_url=pg_url, config_file=toml) as live:
        toml.write_text(AFTER)
        done = live.cli("scontrol", "reconfigure")
        assert done.returncode == 0, done.stderr
        assert live.cli("sinfo", "-h", "-o", "%P").stdout.split() == ["debug*", "extra"]
        with live.client() as c:
            kinds = [e.kind for e in c.events(follow=False)]
            assert kinds.count("config.reconfigured") == 1
