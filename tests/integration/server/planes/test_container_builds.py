"""Images built from a Dockerfile (``hal artifact push NAME@VERSION --dockerfile FILE``;
docs/user/environments.md#containers) with real podman, no registry: the base image is
imported from a root file system tarball made here, the Dockerfile's ``COPY`` and
``RUN`` run with the runtime settings the agents use, the image is published as an
artifact of kind image and a job runs in it; a Dockerfile that fails to build shows the
build's words and publishes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.images import make_rootfs
from hal.testing.live import LiveServer, wait_until

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the agent runs podman as root (rootful)"),
]
BASE = f"localhost/halbase-{os.getpid()}:1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("hal")
    with LiveServer(tmp) as live:
        live.start_agent("node1", cpus=2)
        with live.client() as c:
            wait_until(
                lambda: "node1" in {n.name for n in c.nodes() if n.state == "UP"},
                message="the agent to register",
            )
        yield live


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A base image in podman's storage, imported from a root file system tarball."""
    tmp = tmp_path_factory.mktemp("base")
    rootfs = make_rootfs(tmp / "rootfs", "hal-base")
    with tarfile.open(tmp / "rootfs.tar", "w") as tar:
        tar.add(rootfs, arcname=".")
    subprocess.run(["podman", "import", "--quiet", str(tmp / "rootfs.tar"), BASE], check=True)
    yield BASE
    subprocess.run(["podman", "rmi", "--force", BASE], check=False, capture_output=True)


def _ended(live: LiveServer, job_id: str) -> str:
    with live.client() as c:
        alive = ("PENDING", "RUNNING", "COMPLETING")
        wait_until(lambda: c.job(job_id).state not in alive, 120, message="end")
        return c.job(job_id).state


def _forget(*tags: str) -> None:
    """podman's storage is the host's: the images built go with the test."""
    subprocess.run(["podman", "rmi", "--force", *tags], check=False, capture_output=True)


def test_an_image_built_from_a_dockerfile_is_published_and_a_job_runs_in_it(
    server: LiveServer, base: str, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "hello.txt").write_text("copied in\n")
    (context / "Dockerfile").write_text(
        f"FROM {base}\nCOPY hello.txt /etc/hal-built\nRUN echo made by RUN > /etc/hal-run\n"
    )
    try:
        done = server.cli(
            "artifact", "push", "built@1", "--dockerfile", str(context / "Dockerfile")
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("published built@1 ("), done.stdout
        assert "STEP 3/3: RUN echo made by RUN" in done.stderr  # podman's output, as it came
        assert "Kind=image" in server.cli("artifact", "show", "built@1").stdout
        # the Dockerfile elsewhere, the context named (and --kind image is no conflict)
        (tmp_path / "Other.dockerfile").write_text(f"FROM {base}\nCOPY hello.txt /etc/other\n")
        other = ("--dockerfile", str(tmp_path / "Other.dockerfile"), "--context", str(context))
        done = server.cli("artifact", "push", "built@2", *other, "--kind", "image")
        assert done.returncode == 0, done.stderr
        script = "#!/bin/sh\ncat /etc/hal-built /etc/hal-run /etc/hal-test-image\n"
        (tmp_path / "job.sh").write_text(script)
        args = ("--parsable", "--container=built@1", "-o", "out.txt", "job.sh")
        job = server.cli("sbatch", *args, cwd=tmp_path).stdout.strip()
        out = tmp_path / "out.txt"
        assert _ended(server, job) == "COMPLETED", out.read_text() if out.exists() else job
        assert out.read_text().splitlines() == ["copied in", "made by RUN", "hal-base"]
    finally:
        _forget("localhost/built:1", "localhost/built:2")


def test_a_dockerfile_that_fails_to_build_says_why_and_pushes_nothing(
    server: LiveServer, base: str, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\nRUN echo halfail-marker: no such tool && exit 3\n"
    )
    try:
        done = server.cli(
            "artifact", "push", "broken@1", "--dockerfile", str(tmp_path / "Dockerfile")
        )
        assert done.returncode != 0
        assert "halfail-marker: no such tool" in done.stderr  # the build's own words
        assert "the image did not build (podman build exited" in done.stderr
        assert "nothing was pushed" in done.stderr
        assert "broken" not in server.cli("artifact", "list").stdout
        both = server.cli("artifact", "push", "broken@1", "x.oci.tar", "--dockerfile", "D")
        assert both.returncode != 0 and "either FILE (x.oci.tar) or --dockerfile" in both.stderr
    finally:
        _forget("localhost/broken:1")
