"""Containers on real agents and real podman (docs/user/environments.md): an OCI image
made here from this host's own programs (no registry) is published as an artifact, and
``--container`` runs the batch script in it, as the job's user, with its working
directory mounted, its ``SLURM_*`` variables and its cgroup's memory limit inside; an
OCI bundle folder (Slurm's form) is taken too and left as it was; what is no OCI image is
refused at push, and an image of another architecture fails the job before it starts,
saying why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.client.artifacts import file_sha256
from hal.host.oci import image_facts, node_architecture
from hal.testing import http
from hal.testing.images import make_bundle, make_image, make_rootfs
from hal.testing.live import LiveServer, free_port, wait_until
from hal.wire.submit import JobSubmit

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent runs podman as root (rootful)"),
]
MEMORY = 104857600  # --mem=100M
ALIVE = ("PENDING", "RUNNING", "COMPLETING")
METRICS = free_port()  # the agent's own /metrics


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("hal")
    with LiveServer(tmp) as live:
        live.start_agent("node1", cpus=2, extra=["--metrics-listen", f"127.0.0.1:{METRICS}"])
        live.start_agent("node2", cpus=2)
        with live.client() as c:
            wait_until(
                lambda: {"node1", "node2"} <= {n.name for n in c.nodes() if n.state == "UP"},
                message="the agents to register",
            )
        yield live


@pytest.fixture(scope="module")
def image(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``img@1``: an image whose /etc/os-release says ID=hal-test."""
    tmp = tmp_path_factory.mktemp("image")
    path = make_image(make_rootfs(tmp / "rootfs"), tmp / "image.oci.tar")
    done = server.cli("artifact", "push", "img@1", str(path))
    assert done.returncode == 0, done.stderr
    yield path
    # podman's storage is the host's: the image loaded goes with the test
    subprocess.run(["podman", "rmi", "--force", image_facts(path).image_id], check=False)


def _submit(live: LiveServer, folder: Path, script: str, *args: str) -> str:
    (folder / "job.sh").write_text(script)
    done = live.cli("sbatch", "--parsable", *args, "job.sh", cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _ended(live: LiveServer, job_id: str) -> str:
    with live.client() as c:
        wait_until(lambda: c.job(job_id).state not in ALIVE, 120, message="end")
        return c.job(job_id).state


SCRIPT = """#!/bin/sh
#HAL --container=img@1
. /etc/os-release
echo "id=$ID"
echo "job=$SLURM_JOB_ID"
echo "user=$(id -u)"
cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes
echo written inside > inside.txt
"""


def test_the_batch_script_runs_in_the_image(
    server: LiveServer, image: Path, tmp_path: Path
) -> None:
    job = _submit(server, tmp_path, SCRIPT, "-w", "node1", "--mem=100M", "-o", "out.txt")
    out = tmp_path / "out.txt"
    assert _ended(server, job) == "COMPLETED", out.read_text() if out.exists() else ""
    lines = out.read_text().splitlines()
    assert lines[:3] == ["id=hal-test", f"job={job}", f"user={os.geteuid()}"], lines
    assert int(lines[3]) == MEMORY  # the job's cgroup limit, seen inside
    assert (tmp_path / "inside.txt").read_text() == "written inside\n"  # on the host
    assert not Path("/etc/hal-test-image").exists()  # (it was the image's /etc)
    with server.client() as c:
        assert c.job(job).container == "img@1"
    assert "Container=img@1" in server.cli("scontrol", "show", "job", job).stdout
    # loaded once into podman, under the image's ID, recorded beside the artifact copies
    facts = image_facts(image)
    records = server.data_dir / "agents" / "node1" / "artifacts" / ".images"
    assert [r.read_text() for r in records.iterdir()] == [facts.image_id]


def test_a_second_job_reuses_the_loaded_image(
    server: LiveServer, image: Path, tmp_path: Path
) -> None:
    jobs = [
        _submit(
            server,
            tmp_path,
            "#!/bin/sh\ncat /etc/hal-test-image\n",
            "--container=img@1",
            "-w",
            "node1",
            "-o",
            f"{i}.out",
        )
        for i in range(2)
    ]
    assert [_ended(server, j) for j in jobs] == ["COMPLETED"] * 2
    assert [(tmp_path / f"{i}.out").read_text() for i in range(2)] == ["hal-test\n"] * 2
    assert _loads() == 1  # once on the node, whichever job came first


def _loads() -> float:
    text = http.get(f"http://127.0.0.1:{METRICS}/metrics", timeout=10).text
    found = re.search(r'^hal_agent_container_image_loads_total\{node="node1"\} (\S+)$', text, re.M)
    assert found, text[-2000:]
    return float(found.group(1))


def test_the_jobs_other_nodes_load_its_image_when_it_starts(
    server: LiveServer, tmp_path: Path
) -> None:
    path = make_image(make_rootfs(tmp_path / "rootfs", "ahead"), tmp_path / "ahead.oci.tar")
    assert server.cli("artifact", "push", "ahead@1", str(path)).returncode == 0
    sha = file_sha256(path)
    records = [server.data_dir / f"agents/{n}/artifacts/.images/{sha}" for n in ("node1", "node2")]
    script = "#!/bin/sh\ncat /etc/hal-test-image\n"
    job = _submit(server, tmp_path, script, "-N2", "-w", "node1,node2", "--container=ahead@1")
    image_id = image_facts(path).image_id
    try:
        assert _ended(server, job) == "COMPLETED"
        assert (tmp_path / f"slurm-{job}.out").read_text() == "ahead\n"
        # the batch node loaded it, and the other fetched, checked and loaded it when the
        # job started, with no step there (the host's podman storage is shared: it found
        # it loaded)
        wait_until(lambda: all(r.exists() and r.read_text() == image_id for r in records), 30)
    finally:
        subprocess.run(["podman", "rmi", "--force", image_id], check=False)


def test_over_rest_the_container_is_a_field(
    server: LiveServer, image: Path, tmp_path: Path
) -> None:
    job = JobSubmit(
        script="#!/bin/sh\ncat /etc/hal-test-image\n",
        workdir=str(tmp_path),
        stdout=str(tmp_path / "out.txt"),
        container="img",  # the newest version, pinned now
    )
    with server.client() as c:
        job_id = str(c.submit(job).job_id)
        assert c.job(job_id).container == "img@1"
    assert _ended(server, job_id) == "COMPLETED"
    assert (tmp_path / "out.txt").read_text() == "hal-test\n"


def test_a_cancelled_container_job_leaves_no_container(
    server: LiveServer, image: Path, tmp_path: Path
) -> None:
    script = "#!/bin/sh\necho started\nsleep 300\n"
    job = _submit(server, tmp_path, script, "--container=img@1", "-o", "out.txt")
    out = tmp_path / "out.txt"
    wait_until(lambda: out.exists() and "started" in out.read_text(), 60, message="the start")
    name = f"-{job}.0"
    assert any(name in c for c in _containers()), _containers()
    assert server.cli("scancel", job).returncode == 0
    assert _ended(server, job) == "CANCELLED"
    wait_until(lambda: not any(name in c for c in _containers()), 30, message="no container")


def _containers() -> list[str]:
    done = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_srun_steps_run_in_the_image(server: LiveServer, image: Path, tmp_path: Path) -> None:
    command = 'cat /etc/hal-test-image; echo "$SLURM_PROCID $(id -u)"; pwd'
    done = server.cli(
        "srun", "--container=img@1", "-n2", "-l", "/bin/sh", "-c", command, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    user = os.geteuid()
    assert lines == sorted(
        [
            *(f"{r}: hal-test" for r in (0, 1)),
            *(f"{r}: {r} {user}" for r in (0, 1)),
            *(f"{r}: {tmp_path}" for r in (0, 1)),
        ]
    ), done.stdout


def test_salloc_steps_run_in_the_image(server: LiveServer, image: Path, tmp_path: Path) -> None:
    srun = (sys.executable, "-m", "hal.cli.main", "srun")  # (not Slurm's, if installed)
    argv = ("salloc", "--container=img@1", *srun, "/bin/cat", "/etc/hal-test-image")
    done = server.cli(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hal-test"]


def test_an_oci_bundle_folder_is_taken_and_left_as_it_was(
    server: LiveServer, tmp_path: Path
) -> None:
    bundle = make_bundle(tmp_path / "bundle", marker="hal-bundle")
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    script = '#!/bin/sh\ncat /etc/hal-test-image\necho "$BUNDLE $SLURM_JOB_ID"\n'
    job = _submit(server, tmp_path, script, f"--container={bundle}", "-o", "out.txt")
    out = tmp_path / "out.txt"
    assert _ended(server, job) == "COMPLETED", out.read_text() if out.exists() else ""
    assert out.read_text().splitlines() == ["hal-bundle", f"hal-bundle {job}"]
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before


def test_what_is_no_oci_image_is_refused_at_push(server: LiveServer, tmp_path: Path) -> None:
    rootfs = make_rootfs(tmp_path / "rootfs")
    plain = tmp_path / "rootfs.oci.tar"
    shutil.make_archive(str(tmp_path / "rootfs"), "tar", rootfs)
    (tmp_path / "rootfs.tar").rename(plain)
    done = server.cli("artifact", "push", "notoci@1", str(plain))
    assert done.returncode != 0
    assert "not an OCI image layout" in done.stderr and "podman save" in done.stderr
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    done = server.cli("artifact", "push", "notoci@1", str(text), "--kind", "image")
    assert done.returncode != 0 and "is not a tar file" in done.stderr
    # over REST, the server refuses an "image" that is no tar at all
    response = http.put(
        f"{server.url}/v1/artifacts/notoci/1?kind=image",
        content=b"hello, not a tar\n",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30,
    )
    assert response.status_code == 400 and "podman save" in response.text, response.text
    assert "notoci" not in server.cli("artifact", "list").stdout


def test_an_archive_named_as_a_container_is_refused_at_submission(
    server: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "x").write_text("x")
    shutil.make_archive(str(tmp_path / "tools"), "gztar", tmp_path / "tools")
    assert server.cli("artifact", "push", "tools@1", str(tmp_path / "tools.tar.gz")).returncode == 0
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    done = server.cli("sbatch", "--container=tools@1", "job.sh", cwd=tmp_path)
    assert done.returncode != 0
    assert "not an image" in done.stderr and "--kind image" in done.stderr
    bad = server.cli("sbatch", "--container=docker.io/library/busybox", "job.sh", cwd=tmp_path)
    assert bad.returncode != 0 and "hal artifact push" in bad.stderr


def test_an_image_of_another_architecture_fails_the_job_before_it_starts(
    server: LiveServer, tmp_path: Path
) -> None:
    other = "arm64" if node_architecture() != "arm64" else "amd64"
    path = make_image(make_rootfs(tmp_path / "rootfs"), tmp_path / "other.oci.tar", other)
    assert server.cli("artifact", "push", "otherarch@1", str(path)).returncode == 0
    args = ("--container=otherarch@1", "-o", "out.txt", "-e", "err.txt")
    job = _submit(server, tmp_path, "#!/bin/sh\necho ran\n", *args)
    assert _ended(server, job) == "FAILED"
    assert not (tmp_path / "out.txt").exists() or "ran" not in (tmp_path / "out.txt").read_text()
    here = node_architecture()
    error = (tmp_path / "err.txt").read_text()
    assert f"is for linux/{other}, and this node is linux/{here}" in error
    reason = server.cli("sacct", "-j", job, "-X", "-n", "-P", "-o", "State,Reason")
    assert reason.stdout.split() == ["FAILED|JobLaunchFailure"], reason
    assert f"linux/{other}" in server.cli("explain", job).stdout


@pytest.mark.skipif(not Path("/dev/nvidiactl").exists(), reason="GPU test: this host has no GPU")
def test_a_gpu_job_sees_its_gpus_only(server: LiveServer, image: Path, tmp_path: Path) -> None:
    script = "#!/bin/sh\nls /dev | grep -E '^nvidia[0-9]+$'\n"
    job = _submit(server, tmp_path, script, "--container=img@1", "--gpus=1", "-o", "out.txt")
    assert _ended(server, job) == "COMPLETED"
    assert len((tmp_path / "out.txt").read_text().split()) == 1
