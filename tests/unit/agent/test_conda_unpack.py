"""conda-pack archives on a node (hal.agent.conda, hal.agent.pyenvs): a real conda-pack
shaped archive (hal.testing.conda_pack: a relocatable prefix with conda-pack's
``bin/conda-unpack``) is fetched through the artifact cache, unpacked once per digest,
relocated by its own conda-unpack, made read-only and activated; what is no conda-pack
archive is refused saying how to make one, and the refusal is remembered."""

from __future__ import annotations

import asyncio
import hashlib
import io
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from hal.agent import conda
from hal.agent.artifacts import ArtifactCache
from hal.agent.pyenvs import PythonEnvError, PythonEnvs
from hal.core.pyenv import CONDA
from hal.testing.conda_pack import BINARY, MODULE, PLACEHOLDER, make_conda_pack
from hal.wire.agent import ArtifactPin, PythonEnvPin


class Channel:
    def __init__(self, contents: dict[str, bytes]) -> None:
        self.contents = contents
        self.reads = 0

    async def artifact(self, sha256: str, write: Callable[[bytes], object]) -> None:
        self.reads += 1
        write(self.contents[sha256])


def _pin(data: bytes, name: str = "condaenv") -> PythonEnvPin:
    sha = hashlib.sha256(data).hexdigest()
    artifact = ArtifactPin(name=name, version="1", sha256=sha, kind="archive")
    return PythonEnvPin(kind=CONDA, sha256=sha, files={}, artifact=artifact)


def _run(prefix_bin: Path, *argv: str) -> str:
    return subprocess.run(
        [str(prefix_bin / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{prefix_bin}:/usr/bin:/bin"},
    ).stdout


@pytest.mark.parametrize("top", ["", "halenv"])
def test_an_archive_is_unpacked_relocated_and_runs_from_where_it_lies(
    tmp_path: Path, top: str
) -> None:
    archive = make_conda_pack(tmp_path / "build", tmp_path / "env.tar.gz", top=top)
    prefix = tmp_path / "node" / "env"
    prefix.parent.mkdir()
    conda.unpack(archive, prefix, "condaenv@1")
    said = _run(prefix / "bin", "python", "-c", "import sys; print(sys.prefix)")
    assert said.strip() == str(prefix)
    # its console script (#!/usr/bin/env python) and a text file conda-unpack rewrote
    hello = _run(prefix / "bin", "halhello").split()
    assert hello == ["hello", "from", str(prefix), f"{prefix}/share/halconda"]
    binary = (prefix / BINARY).read_bytes()
    assert len(binary) == 5 + len(PLACEHOLDER + "/lib") + 200 + 4  # padded, not moved
    assert f"{prefix}/lib\0".encode() in binary and PLACEHOLDER.encode() not in binary
    assert not (tmp_path / "build" / "envs").exists()  # (nothing left where it was built)


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_what_is_no_conda_pack_archive_is_refused_saying_how_to_make_one(tmp_path: Path) -> None:
    plain = _tar(tmp_path / "plain.tar.gz", {"bin/tool": b"#!/bin/sh\n", "lib/x": b"x"})
    with pytest.raises(conda.CondaError, match=r"not a conda-pack archive.*no bin/conda-unpack"):
        conda.unpack(plain, tmp_path / "a", "tools@1")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(conda.CondaError, match=r"not a tar archive.*conda pack -n ENV"):
        conda.unpack(text, tmp_path / "b", "notes@1")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_node_unpacks_once_per_digest_and_activates_it(tmp_path: Path) -> None:
    data = make_conda_pack(tmp_path / "build", tmp_path / "env.tar.gz").read_bytes()
    pin = _pin(data)
    channel = Channel({pin.sha256: data})
    live = {1, 2}
    cache = ArtifactCache(tmp_path / "artifacts", channel, 1 << 30, lambda: live)
    envs = PythonEnvs(cache)
    before = {"PATH": "/old/venv/bin:/usr/bin:/bin", "VIRTUAL_ENV": "/old/venv", "X": "1"}

    async def two_jobs() -> list[dict[str, str]]:
        return list(await asyncio.gather(*(envs.activate(j, pin, before) for j in (1, 2))))

    first, second = asyncio.run(two_jobs())
    prefix = tmp_path / "artifacts" / f"{pin.sha256}.conda" / "env"
    assert first == second
    assert first["CONDA_PREFIX"] == str(prefix) and first["HAL_PYTHON_ENV"] == pin.sha256
    assert first["PATH"] == f"{prefix}/bin:/usr/bin:/bin"  # the old venv gave way
    assert "VIRTUAL_ENV" not in first and first["X"] == "1"
    assert envs.builds == 1 and channel.reads == 1
    assert (prefix.parent / "ready").exists()
    assert not prefix.joinpath("bin/halhello").stat().st_mode & 0o222  # read-only
    said = _run(prefix / "bin", "python", "-c", f"import {MODULE}; print({MODULE}.PREFIX)")
    assert said.strip() == f"{prefix}/share/halconda"
    # a third job: ready, nothing fetched or unpacked again
    asyncio.run(envs.activate(3, pin, {}))
    assert envs.builds == 1 and channel.reads == 1


def test_a_refused_archive_fails_the_job_and_is_not_unpacked_again(tmp_path: Path) -> None:
    data = _tar(tmp_path / "x.tar.gz", {"bin/tool": b"#!/bin/sh\n"}).read_bytes()
    pin = _pin(data, "tools")
    channel = Channel({pin.sha256: data})
    cache = ArtifactCache(tmp_path / "artifacts", channel, 1 << 30, lambda: {1, 2})
    envs = PythonEnvs(cache)
    with pytest.raises(PythonEnvError, match=r"tools@1 is not a conda-pack archive"):
        asyncio.run(envs.activate(1, pin, {}))
    with pytest.raises(PythonEnvError, match=r"not tried again for 600 s"):
        asyncio.run(envs.activate(2, pin, {}))
    assert envs.failures == 1
    assert not (tmp_path / "artifacts" / f"{pin.sha256}.conda").exists()
