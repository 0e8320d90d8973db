"""``hal artifact push NAME@VERSION --dockerfile FILE [--context DIR]``: an image built
from a Dockerfile with podman on this machine, saved as an OCI archive and published as
an artifact of kind ``image`` (docs/user/environments.md#containers).

podman runs with the runtime and settings the agents use for their containers
(``hal.agent.containers.find_runtime``: runc where crun cannot run, HAL's own
containers.conf with ``default_ulimits = []``), so a ``RUN`` step works on the hosts
where jobs' containers do. podman's build output goes to stderr as it comes (stdout
stays for ``--json``); a build that fails publishes nothing. The image stays in this
machine's podman storage as ``localhost/NAME:VERSION``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hal.agent.containers import ContainerError, find_runtime
from hal.core.errors import InvalidRequest

BUILD_TIMEOUT_S = 3 * 3600.0
ELSEWHERE = (
    "build the image elsewhere and push its OCI archive (podman save --format oci-archive "
    "-o image.oci.tar IMAGE; hal artifact push NAME@VERSION image.oci.tar)"
)
NO_PODMAN = (
    "building from a Dockerfile needs podman on this machine: install podman and runc "
    f"(Debian: apt-get install podman runc), or {ELSEWHERE}"
)


def image_tag(name: str, version: str) -> str:
    """The local tag the build gets: ``localhost/NAME:VERSION``, in the characters
    podman takes (lower case; ``+`` and others become ``-`` or ``_``)."""
    repo = re.sub(r"[^a-z0-9._-]", "-", name.lower()).strip("._-") or "image"
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", version).lstrip(".-") or "latest"
    return f"localhost/{repo}:{tag[:128]}"


@contextmanager
def built_image(dockerfile: Path, context: Path | None, tag: str) -> Iterator[Path]:
    """The image built from ``dockerfile`` (in ``context``, default its folder), tagged
    ``tag`` and saved as an OCI archive in a temporary folder, removed afterwards;
    InvalidRequest saying what to do when it cannot be built."""
    if not dockerfile.is_file():
        raise InvalidRequest(f"--dockerfile {dockerfile}: no such file", field="dockerfile")
    folder = context if context is not None else dockerfile.resolve().parent
    if not folder.is_dir():
        raise InvalidRequest(f"--context {folder}: no such folder", field="context")
    with tempfile.TemporaryDirectory(prefix="hal-build-") as work:
        if shutil.which("podman") is None:
            raise InvalidRequest(NO_PODMAN, field="dockerfile")
        try:
            runtime = find_runtime(Path(work))
        except ContainerError as err:  # (no OCI runtime podman can use here)
            raise InvalidRequest(f"cannot build here: {err}; or {ELSEWHERE}") from err
        podman = [runtime.podman, "--runtime", runtime.oci]
        env = {**os.environ, "CONTAINERS_CONF": runtime.conf}
        build = [*podman, "build", "--force-rm", "--file", str(dockerfile), "--tag", tag]
        build.append(str(folder))
        code = _run(build, env)
        if code != 0:
            raise InvalidRequest(
                f"the image did not build (podman build exited {code}; its output is "
                "above): nothing was pushed; fix the Dockerfile and run again",
                field="dockerfile",
            )
        archive = Path(work) / "image.oci.tar"
        save = [*podman, "save", "--quiet", "--format", "oci-archive", "-o", str(archive), tag]
        if _run(save, env) != 0:
            raise InvalidRequest(f"podman could not save {tag} as an OCI archive: nothing pushed")
        yield archive


def _run(argv: list[str], env: dict[str, str]) -> int:
    """Run podman, its output to our stderr as it comes; its exit code."""
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
            stderr=sys.stderr,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise InvalidRequest(f"podman ran over {BUILD_TIMEOUT_S:.0f} s: nothing pushed") from err
    except OSError as err:
        raise InvalidRequest(f"cannot run podman: {err.strerror}") from err
    return done.returncode
