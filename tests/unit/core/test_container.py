"""``--container``'s value (hal.core.container), an image tarball's facts
(hal.host.oci) and the spec's round trip through the store's codec."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from hal.core.artifacts import ARCHIVE, IMAGE, ArtifactRef, kind_of_name
from hal.core.container import Container, check_pinned, parse_container
from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.host.oci import image_facts, node_architecture
from hal.state.codec import spec_from_json, spec_to_json
from hal.testing.images import make_image


def test_an_image_artifact_or_a_bundle_path() -> None:
    assert parse_container("img@1") == Container(image=ArtifactRef("img", "1", "", IMAGE))
    assert parse_container(" img ").image == ArtifactRef("img", "latest", "", IMAGE)
    assert parse_container("/opt/bundles/b/") == Container(bundle="/opt/bundles/b")
    assert str(parse_container("/b")) == "/b" and str(parse_container("i@2")) == "i@2"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("", "needs an image"),
        ("docker.io/library/busybox", "not registry references"),
        ("busybox:latest", "hal artifact push"),
        ("img@", "no version after '@'"),
    ],
)
def test_what_is_neither_is_refused_saying_what_to_give(value: str, said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        parse_container(value)


def test_a_pinned_artifact_must_be_an_image() -> None:
    pinned = Container(image=ArtifactRef("tools", "1", "a" * 64, ARCHIVE))
    with pytest.raises(InvalidRequest, match=r"is an archive, not an image.*--kind image"):
        check_pinned(pinned)
    image = Container(image=ArtifactRef("img", "1", "a" * 64, IMAGE))
    assert check_pinned(image) == image


def test_oci_tarballs_are_images_by_their_name() -> None:
    assert kind_of_name("image.oci.tar") == IMAGE
    assert kind_of_name("image.tar") == ARCHIVE


def test_the_spec_keeps_its_container() -> None:
    for container in (
        Container(image=ArtifactRef("img", "1", "b" * 64, IMAGE)),
        Container(bundle="/opt/b"),
    ):
        spec = JobSpec(user="u", script="#!/bin/sh\n", container=container)
        assert spec_from_json(spec_to_json(spec), spec.script).container == container


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_oci_layout_tarball_says_its_architecture(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "os-release").write_text("ID=x\n")
    facts = image_facts(make_image(rootfs, tmp_path / "i.oci.tar", "riscv64"))
    assert (facts.architecture, facts.os, facts.layers) == ("riscv64", "linux", 1)
    assert facts.config_digest == "sha256:" + facts.image_id
    assert image_facts(make_image(rootfs, tmp_path / "h.oci.tar")).architecture == (
        node_architecture()
    )


def test_what_is_no_oci_image_is_refused_saying_how_to_make_one(tmp_path: Path) -> None:
    docker = _tar(tmp_path / "d.tar", {"manifest.json": b"[]", "repositories": b"{}"})
    with pytest.raises(InvalidRequest, match=r"docker-archive.*podman save --format oci-archive"):
        image_facts(docker)
    plain = _tar(tmp_path / "p.tar", {"bin/sh": b"x"})
    with pytest.raises(InvalidRequest, match="a plain tar, not an OCI image layout"):
        image_facts(plain)
    (tmp_path / "n.oci.tar").write_text("hello")
    with pytest.raises(InvalidRequest, match="is not a tar file"):
        image_facts(tmp_path / "n.oci.tar")
    index = {"manifests": [{"digest": "sha256:aa"}, {"digest": "sha256:bb"}]}
    two = _tar(
        tmp_path / "two.tar", {"oci-layout": b"{}", "index.json": json.dumps(index).encode()}
    )
    with pytest.raises(InvalidRequest, match="holds 2 image manifests"):
        image_facts(two)
    index = {"manifests": [{"digest": "sha256:aa"}]}
    lost = _tar(
        tmp_path / "lost.tar", {"oci-layout": b"{}", "index.json": json.dumps(index).encode()}
    )
    with pytest.raises(InvalidRequest, match=r"the image manifest \(blobs/sha256/aa\) is missing"):
        image_facts(lost)


def test_sbatch_takes_it_on_the_command_line_and_in_the_script(tmp_path: Path) -> None:
    from hal.compat.sbatch import parse_sbatch

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --container=img@2\ntrue\n")

    def body(*argv: str) -> object:
        parsed = parse_sbatch(
            [*argv, str(script)], environ={}, cwd=str(tmp_path), read_stdin=str, now=0
        )
        return parsed.body.get("container")

    assert body() == "img@2"
    assert body("--container=/opt/bundle") == "/opt/bundle"  # the command line wins
    with pytest.raises(InvalidRequest, match="not registry references"):
        body("--container=quay.io/x/y")
