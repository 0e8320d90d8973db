"""How a job names its artifacts (``--artifact NAME[@VERSION]``, hal.core.artifacts):
a name alone means the newest version, comma lists may span several values, and a bad
name, an empty version, a name given twice, two names sharing one variable or too many
artifacts are refused with a message that says what is wrong."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from hal.core.artifacts import (
    HEAD,
    LATEST,
    MAX_ARTIFACTS,
    ArtifactRef,
    check_version,
    parse_request,
    parse_requests,
    suffix_of,
    variable_of,
)
from hal.core.errors import InvalidRequest


def test_a_name_alone_means_the_latest_version() -> None:
    assert parse_request("gromacs") == ("gromacs", LATEST)
    assert LATEST == "latest"


def test_name_at_version() -> None:
    assert parse_request("gromacs@2024.1") == ("gromacs", "2024.1")
    assert parse_request("  tool@1.0+cuda  ") == ("tool", "1.0+cuda")


def test_comma_lists_across_several_values() -> None:
    assert parse_requests(["a@1,b", "c@2.0", " d , e@x "]) == [
        ("a", "1"),
        ("b", LATEST),
        ("c", "2.0"),
        ("d", LATEST),
        ("e", "x"),
    ]
    assert parse_requests(["a,,b,"]) == [("a", LATEST), ("b", LATEST)]
    assert parse_requests([]) == []


def test_an_empty_version_says_what_to_write() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request("tool@")
    assert "'tool@'" in caught.value.message
    assert "no version after '@'" in caught.value.message
    assert "NAME@VERSION" in caught.value.message
    assert "NAME alone" in caught.value.message
    assert caught.value.field == "artifacts"


@pytest.mark.parametrize("name", ["my tool", ".hidden", "a" * 129, "", "-x", "a/b"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(name)
    assert f"artifact name {name.strip()!r} is not valid" in caught.value.message
    assert "at most 128" in caught.value.message
    assert caught.value.field == "name"


def test_the_longest_name_is_128_characters() -> None:
    assert parse_request("a" * 128) == ("a" * 128, LATEST)


def test_an_invalid_version_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request("tool@1 0")
    assert "artifact version '1 0' is not valid" in caught.value.message
    assert caught.value.field == "version"


def test_the_same_name_twice_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_requests(["tool@1", "other,tool@2"])
    assert "artifact 'tool' is named twice" in caught.value.message
    assert "one version of each" in caught.value.message
    assert caught.value.field == "artifacts"


def test_two_names_sharing_one_variable_are_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_requests(["my-tool,my.tool"])
    message = caught.value.message
    assert "'my-tool'" in message
    assert "'my.tool'" in message
    assert "$HAL_ARTIFACT_MY_TOOL" in message
    assert caught.value.field == "artifacts"


def test_at_most_max_artifacts() -> None:
    names = [f"t{i}" for i in range(MAX_ARTIFACTS)]
    assert len(parse_requests([",".join(names)])) == MAX_ARTIFACTS
    with pytest.raises(InvalidRequest) as caught:
        parse_requests([",".join(names), "one-more"])
    message = caught.value.message
    assert f"at most {MAX_ARTIFACTS} artifacts, not {MAX_ARTIFACTS + 1}" in message
    assert "one archive" in message
    assert caught.value.field == "artifacts"


def test_latest_cannot_be_published() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_version("latest")
    assert "'latest' is not a version one may publish" in caught.value.message
    assert "such as 1.0" in caught.value.message
    assert caught.value.field == "version"
    assert check_version("1.0") == "1.0"


def test_check_version_refuses_invalid_versions() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_version(".1")
    assert "artifact version '.1' is not valid" in caught.value.message
    assert caught.value.field == "version"


def test_variable_of() -> None:
    assert variable_of("gromacs-2024") == "HAL_ARTIFACT_GROMACS_2024"
    assert variable_of("My.tool+x") == "HAL_ARTIFACT_MY_TOOL_X"
    ref = ArtifactRef("gromacs-2024", "1.0", "0" * 64)
    assert ref.variable == "HAL_ARTIFACT_GROMACS_2024"
    assert str(ref) == "gromacs-2024@1.0"


@pytest.mark.parametrize(
    ("mode", "suffix"),
    [("w:gz", ".tar.gz"), ("w:bz2", ".tar.bz2"), ("w:xz", ".tar.xz"), ("w", ".tar")],
)
def test_an_archives_first_bytes_give_its_suffix(mode: str, suffix: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:  # type: ignore[call-overload]
        data = b"x"
        info = tarfile.TarInfo("a")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    assert suffix_of(buffer.getvalue()[:HEAD]) == suffix


def test_a_zip_and_a_program_give_their_suffix() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("a", "x")
    assert suffix_of(buffer.getvalue()[:HEAD]) == ".zip"
    assert suffix_of(b"#!/bin/sh\necho hi\n") == ""
