"""``hal artifact push --dockerfile`` before podman runs: the local tag it builds, and
what it says on a machine without podman or without the Dockerfile (nothing pushed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.cli.image_build import built_image, image_tag
from hal.core.errors import InvalidRequest


def test_the_tag_is_the_name_and_version_in_podmans_characters() -> None:
    assert image_tag("myimage", "1") == "localhost/myimage:1"
    assert image_tag("My+Image", "2.0+cu121") == "localhost/my-image:2.0_cu121"


def test_without_podman_it_says_to_install_it_or_push_an_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(InvalidRequest) as err, built_image(tmp_path / "Dockerfile", None, "x:1"):
        pass
    assert "needs podman on this machine: install podman and runc" in err.value.message
    assert "podman save --format oci-archive" in err.value.message
    missing = pytest.raises(InvalidRequest, match=r"--dockerfile .*nope: no such file")
    with missing, built_image(tmp_path / "nope", None, "x:1"):
        pass
    gone = pytest.raises(InvalidRequest, match=r"--context .*gone: no such folder")
    with gone, built_image(tmp_path / "Dockerfile", tmp_path / "gone", "x:1"):
        pass
