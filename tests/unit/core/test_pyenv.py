"""``--python-env`` locks: what is accepted, what is refused (and says what to do), and the
digest that names an environment on every node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal.core.artifacts import ARCHIVE, PROGRAM, ArtifactRef
from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.core.pyenv import (
    ARTIFACT_KEY,
    CONDA,
    REQUIREMENTS,
    UV,
    make_python_env,
    pin_conda,
    read_lock,
)
from hal.state.codec import spec_from_json, spec_to_json

LOCK = """\
# uv pip compile requirements.in -o requirements.txt
certifi==2024.8.30 \\
    --hash=sha256:922820b53db7a7257ffbda3f597266d435245903d80737e34f8a45ff3e3230d8
idna==3.10 ; python_version >= "3.6"
requests[socks]==2.32.3  # via -r requirements.in
--index-url https://example.org/simple
wheelhouse @ https://example.org/wheelhouse-1.0-py3-none-any.whl
"""


def test_a_pinned_requirements_lock_is_taken_and_named_by_its_content() -> None:
    env = make_python_env({"requirements.txt": LOCK})
    assert env.kind == REQUIREMENTS
    assert env.files == (("requirements.txt", LOCK),)
    again = make_python_env({"requirements.txt": LOCK})
    assert again.sha256 == env.sha256
    changed = make_python_env({"requirements.txt": LOCK.replace("3.10", "3.9")})
    assert changed.sha256 != env.sha256


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("numpy>=1.26\n", "line 1 ('numpy>=1.26') is not pinned"),
        ("six==1.16.0\nrequests\n", "line 2 ('requests') is not pinned"),
        ("-r base.txt\nsix==1.16.0\n", "refers to another file"),
        ("-e ./src\n", "editable"),
        ("# nothing\n\n", "lists no package"),
    ],
)
def test_a_lock_that_pins_nothing_exactly_is_refused_saying_what_to_do(
    text: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        make_python_env({"requirements.txt": text})
    assert says in str(refused.value)
    assert refused.value.field == "python_env"


def test_a_uv_project_needs_both_files_and_a_lock_with_packages() -> None:
    lock = 'version = 1\n[[package]]\nname = "six"\nversion = "1.16.0"\n'
    env = make_python_env({"pyproject.toml": "[project]\nname='x'\n", "uv.lock": lock})
    assert env.kind == UV
    with pytest.raises(InvalidRequest, match=r"give \{.requirements.txt.: TEXT\}"):
        make_python_env({"uv.lock": lock})
    with pytest.raises(InvalidRequest, match="run `uv lock`"):
        make_python_env({"pyproject.toml": "", "uv.lock": "version = 1\n"})


def test_read_lock_takes_a_file_or_a_project_and_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "req.lock").write_text("six==1.16.0\n")
    assert read_lock(str(tmp_path / "req.lock")) == {"requirements.txt": "six==1.16.0\n"}
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    with pytest.raises(InvalidRequest, match=r"uv\.lock not found"):
        read_lock(str(tmp_path))
    (tmp_path / "uv.lock").write_text("[[package]]\n")
    assert set(read_lock(str(tmp_path / "pyproject.toml"))) == {"pyproject.toml", "uv.lock"}
    with pytest.raises(InvalidRequest, match="cannot read"):
        read_lock(str(tmp_path / "missing.txt"))


def test_a_conda_environment_is_named_as_an_artifact_and_a_lock_file_wins(tmp_path: Path) -> None:
    assert read_lock("condaenv@1", str(tmp_path)) == {ARTIFACT_KEY: "condaenv@1"}
    (tmp_path / "odd@1").write_text("halpkga==1.0\n")  # a lock file of that name is read
    assert read_lock("odd@1", str(tmp_path)) == {"requirements.txt": "halpkga==1.0\n"}
    env = make_python_env({ARTIFACT_KEY: "condaenv@stable"})
    assert (env.kind, env.sha256, env.files) == (CONDA, "", ())
    assert env.artifact == ArtifactRef("condaenv", "stable", "", ARCHIVE)
    pinned = pin_conda(env, ArtifactRef("condaenv", "3", "ab" * 32, ARCHIVE, "stable"))
    assert pinned.sha256 == "ab" * 32 and pinned.shown == "conda:condaenv@3"
    with pytest.raises(InvalidRequest, match=r"NAME@VERSION, NAME@ALIAS or NAME@latest"):
        make_python_env({ARTIFACT_KEY: "condaenv"})
    with pytest.raises(InvalidRequest, match=r"is a program, not a conda-pack archive.*conda pack"):
        pin_conda(env, ArtifactRef("condaenv", "3", "ab" * 32, PROGRAM))


def test_a_pinned_conda_environment_survives_the_store_and_older_records_still_read() -> None:
    env = pin_conda(
        make_python_env({ARTIFACT_KEY: "condaenv@stable"}),
        ArtifactRef("condaenv", "3", "cd" * 32, ARCHIVE, "stable"),
    )
    spec = JobSpec(user="alice", script="#!/bin/sh\n", python_env=env)
    back = spec_from_json(spec_to_json(spec), spec.script)
    assert back.python_env == env
    lock = make_python_env({"requirements.txt": "halpkga==1.0\n"})
    old = json.loads(spec_to_json(JobSpec(user="alice", script="", python_env=lock)))
    assert len(old["python_env"]) == 3  # (a lock's record is as it was)
    assert spec_from_json(json.dumps(old), "").python_env == lock
