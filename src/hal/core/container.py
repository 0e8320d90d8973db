"""A job's container (``--container``; docs/user/environments.md): the image its batch
script and steps run in. Pure: no I/O.

Two forms, as Slurm's and Pyxis' options take them:

- ``NAME[@VERSION]``: an OCI image published as an artifact of kind ``image``
  (``hal artifact push NAME@VERSION image.oci.tar``), pinned by content at submission;
- ``/path/to/bundle``: an OCI bundle folder (``config.json`` and its ``rootfs``) that
  every node of the job sees at that path, as Slurm's ``--container`` takes it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from hal.core.artifacts import IMAGE, ArtifactRef, parse_request
from hal.core.errors import InvalidRequest

MAX_PATH = 4096


@dataclass(frozen=True, slots=True)
class Container:
    image: ArtifactRef | None = None  # the published image (pinned at submission)
    bundle: str = ""  # or an OCI bundle folder on the nodes

    def __str__(self) -> str:
        return self.bundle or str(self.image)


def parse_container(text: str) -> Container:
    """``--container``'s value: an absolute bundle path, or ``NAME[@VERSION]``."""
    value = text.strip()
    if not value:
        raise InvalidRequest(
            "--container needs an image (NAME@VERSION, published with hal artifact push "
            "NAME@VERSION image.oci.tar) or an OCI bundle folder (an absolute path)",
            field="container",
        )
    if value.startswith("/"):
        if len(value) > MAX_PATH or "\0" in value:
            raise InvalidRequest("--container: the bundle path is not valid", field="container")
        return Container(bundle=posixpath.normpath(value))
    if "/" in value or ":" in value:
        raise InvalidRequest(
            f"--container={value!r}: HAL runs images published as artifacts (NAME@VERSION), "
            "not registry references; save it (podman save --format oci-archive -o "
            "image.oci.tar IMAGE) and publish it (hal artifact push NAME@VERSION "
            "image.oci.tar), or give an OCI bundle's absolute path",
            field="container",
        )
    name, version = parse_request(value)
    return Container(image=ArtifactRef(name, version, "", IMAGE))


def check_pinned(container: Container) -> Container:
    """After pinning: the artifact named must be an image."""
    image = container.image
    if image is not None and image.kind != IMAGE:
        raise InvalidRequest(
            f"--container={image}: that artifact is a{'n' if image.kind[0] in 'aeiou' else ''} "
            f"{image.kind}, not an image: publish an OCI image tarball (hal artifact push "
            f"{image.name}@VERSION image.oci.tar --kind image)",
            field="container",
        )
    return container
