"""OCI images as files: what an image layout tarball (``podman save --format
oci-archive``, or any OCI image layout packed with tar) holds, read without unpacking it.

``image_facts`` checks the layout (``oci-layout``, ``index.json``, one image manifest and
its config) and returns what a node needs to decide whether it can run the image: its
architecture and OS, and the config's digest, which is podman's image ID. Anything else
(a ``docker save`` archive, a rootfs tarball, a file that is no tar) is refused saying
how to make an OCI one. Used by ``hal artifact push`` (before the upload) and by the
agent (before a job runs in the image).
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hal.core.errors import InvalidRequest

if TYPE_CHECKING:
    import tarfile

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MAX_JSON_BYTES = 4 * 1024 * 1024
MAKE_ONE = (
    "make an OCI image tarball: `podman save --format oci-archive -o image.oci.tar IMAGE` "
    "(a rootfs tarball: `podman import rootfs.tar IMAGE` first)"
)
# Go's names (the image config's ``architecture``) for Python's ``platform.machine()``
_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "i686": "386",
    "i386": "386",
    "armv7l": "arm",
}


@dataclass(frozen=True, slots=True)
class ImageFacts:
    architecture: str  # Go's name: amd64, arm64 ...
    os: str  # linux
    config_digest: str  # "sha256:HEX": podman's image ID is HEX
    layers: int

    @property
    def image_id(self) -> str:
        return self.config_digest.partition(":")[2]


def node_architecture() -> str:
    """This host's architecture as image configs name it."""
    machine = platform.machine().lower()
    return _GOARCH.get(machine, machine)


def image_facts(path: Path) -> ImageFacts:
    """The facts of the OCI image layout tarball at ``path``; InvalidRequest saying what
    to do when it is no such thing."""
    import tarfile  # here: an agent imports this module at start and reads no image then

    try:
        if not tarfile.is_tarfile(path):
            raise InvalidRequest(f"{path.name} is not a tar file: {MAKE_ONE}", field="kind")
        with tarfile.open(path) as tar:
            return _facts(tar, path.name)
    except (OSError, tarfile.TarError) as err:
        raise InvalidRequest(f"cannot read {path.name} as an OCI image: {err}") from err


def _facts(tar: tarfile.TarFile, name: str) -> ImageFacts:
    members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}

    def read_json(member: str, what: str) -> Any:
        info = members.get(member)
        if info is None:
            raise InvalidRequest(f"{name}: {what} ({member}) is missing: {MAKE_ONE}", field="kind")
        if info.size > MAX_JSON_BYTES:
            raise InvalidRequest(f"{name}: {member} is too large for {what}", field="kind")
        f = tar.extractfile(info)
        assert f is not None  # (a regular file)
        try:
            return json.loads(f.read())
        except ValueError as err:
            raise InvalidRequest(f"{name}: {member} is not JSON ({err})", field="kind") from err

    def blob(digest: str) -> str:
        algorithm, _, hexa = str(digest).partition(":")
        return f"blobs/{algorithm}/{hexa}"

    if "oci-layout" not in members:
        said = "a docker-archive (docker save)" if "manifest.json" in members else "a plain tar"
        raise InvalidRequest(
            f"{name} is {said}, not an OCI image layout (it has no oci-layout file): {MAKE_ONE}",
            field="kind",
        )
    document = read_json("index.json", "the image index")
    for _ in range(4):  # an index may name an index (nested): go down to a manifest
        manifests = [m for m in document.get("manifests", []) if isinstance(m, dict)]
        if len(manifests) != 1:
            raise InvalidRequest(
                f"{name} holds {len(manifests)} image manifests: a job runs one image; "
                "save one image (one platform) per tarball",
                field="kind",
            )
        entry = manifests[0]
        if entry.get("mediaType") == DOCKER_MANIFEST:
            raise InvalidRequest(f"{name} names a Docker manifest: {MAKE_ONE}", field="kind")
        document = read_json(blob(entry.get("digest", "")), "the image manifest")
        if document.get("mediaType", MANIFEST) != INDEX and "config" in document:
            break
    else:
        raise InvalidRequest(f"{name}: no image manifest found in its index", field="kind")
    config_digest = str(document["config"].get("digest", ""))
    config = read_json(blob(config_digest), "the image config")
    layers = document.get("layers", [])
    for layer in layers:
        if blob(layer.get("digest", "")) not in members:
            raise InvalidRequest(
                f"{name}: layer {layer.get('digest', '')} is missing (a partial save?): "
                + MAKE_ONE,
                field="kind",
            )
    architecture = str(config.get("architecture") or "")
    if not architecture:
        raise InvalidRequest(f"{name}: the image config names no architecture", field="kind")
    return ImageFacts(architecture, str(config.get("os") or "linux"), config_digest, len(layers))
