"""Python environments on a node (hal.agent.pyenvs), built for real with uv and with pip
from wheels made here (a ``--find-links`` folder, no index): built once per lock and
reused, shared by jobs that ask at once, a lock that does not resolve fails with the
resolver's words and is not built again, and eviction never takes one a job uses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.agent import pyenvs
from hal.agent.artifacts import ArtifactCache
from hal.agent.pyenvs import PythonEnvError, PythonEnvs
from hal.core.pyenv import make_python_env
from hal.testing.wheels import make_wheel
from hal.wire.agent import PythonEnvPin


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of wheels, the only place uv and pip may take packages from."""
    folder = tmp_path / "wheels"
    make_wheel(folder, "halpkga", "1.0")
    make_wheel(folder, "halpkga", "2.0")
    make_wheel(folder, "halpkgb", "0.1", requires="halpkga==2.0")
    for name in list(os.environ):
        if name.startswith(("UV_", "PIP_")) or name == "VIRTUAL_ENV":
            monkeypatch.delenv(name)
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    yield folder


def _pin(text: str) -> PythonEnvPin:
    env = make_python_env({"requirements.txt": text})
    return PythonEnvPin(kind=env.kind, sha256=env.sha256, files=dict(env.files))


def _envs(tmp_path: Path, live: set[int], limit: int = 10**12) -> PythonEnvs:
    return PythonEnvs(ArtifactCache(tmp_path / "artifacts", None, limit, lambda: live))


def _python(env: dict[str, str], code: str) -> str:
    run = subprocess.run(
        ["python", "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return run.stdout.strip()


def test_uv_builds_once_and_the_job_runs_with_it_active(tmp_path: Path, wheels: Path) -> None:
    envs = _envs(tmp_path, {1, 2})
    pin = _pin("halpkgb==0.1\nhalpkga==2.0\n")
    env = asyncio.run(envs.activate(1, pin, {"PATH": "/usr/bin:/bin", "PYTHONHOME": "/x"}))
    venv = tmp_path / "artifacts" / f"{pin.sha256}.venv" / "venv"
    assert env["VIRTUAL_ENV"] == str(venv)
    assert env["PATH"] == f"{venv}/bin:/usr/bin:/bin" and "PYTHONHOME" not in env
    assert env["HAL_PYTHON_ENV"] == pin.sha256
    assert _python(env, "import halpkga, halpkgb, sys; print(halpkga.VERSION, sys.prefix)") == (
        f"2.0 {venv}"
    )
    assert not (venv / "pyvenv.cfg").stat().st_mode & 0o222  # read-only: jobs cannot change it
    again = asyncio.run(envs.activate(2, pin, {"PATH": env["PATH"]}))
    assert again["PATH"] == env["PATH"]  # no second copy of its bin in PATH
    assert envs.builds == 1


def test_without_uv_pip_builds_it(
    tmp_path: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pyenvs, "find_uv", lambda: None)
    envs = _envs(tmp_path, {1})
    env = asyncio.run(envs.activate(1, _pin("halpkga==1.0\n"), {"PATH": "/usr/bin:/bin"}))
    assert _python(env, "import halpkga; print(halpkga.VERSION)") == "1.0"
    assert (Path(env["VIRTUAL_ENV"]) / "bin" / "pip").exists()  # pip's venv, not uv's


def test_jobs_with_the_same_lock_at_once_share_one_build(tmp_path: Path, wheels: Path) -> None:
    envs = _envs(tmp_path, {1, 2, 3})
    pin = _pin("halpkga==1.0\n")

    async def three() -> list[dict[str, str]]:
        return await asyncio.gather(*(envs.activate(j, pin, {}) for j in (1, 2, 3)))

    got = asyncio.run(three())
    assert len({e["VIRTUAL_ENV"] for e in got}) == 1
    assert envs.builds == 1


def test_a_lock_that_does_not_resolve_fails_with_the_resolvers_words_and_is_not_retried(
    tmp_path: Path, wheels: Path
) -> None:
    envs = _envs(tmp_path, {1, 2, 3})
    bad = _pin("halpkga==9.9\n")
    with pytest.raises(PythonEnvError) as failed:
        asyncio.run(envs.activate(1, bad, {}))
    said = str(failed.value)
    assert "could not be built" in said and "halpkga" in said and "9.9" in said
    assert not (tmp_path / "artifacts" / f"{bad.sha256}.venv").exists()  # nothing half-made
    # the same lock again: the remembered failure, without building
    with pytest.raises(PythonEnvError, match="not tried again") as again:
        asyncio.run(envs.activate(2, bad, {}))
    assert "halpkga" in str(again.value)
    assert envs.builds == 0
    # the corrected lock is another environment, built at once
    asyncio.run(envs.activate(3, _pin("halpkga==2.0\n"), {}))
    assert envs.builds == 1


def test_eviction_never_removes_an_environment_a_live_job_uses(
    tmp_path: Path, wheels: Path
) -> None:
    live = {1}
    envs = _envs(tmp_path, live, limit=1)  # every environment is over the limit
    first, second = _pin("halpkga==1.0\n"), _pin("halpkga==2.0\n")
    one = asyncio.run(envs.activate(1, first, {}))
    live.add(2)
    asyncio.run(envs.activate(2, second, {}))
    root = tmp_path / "artifacts"
    assert (root / f"{first.sha256}.venv" / "ready").exists()  # job 1 still runs in it
    assert _python(one, "import halpkga; print(halpkga.VERSION)") == "1.0"
    live.discard(1)
    envs.cache.evict(live)
    assert not (root / f"{first.sha256}.venv").exists()  # its job ended: least recent goes
    assert (root / f"{second.sha256}.venv" / "ready").exists()


def test_a_uv_project_lock_is_synced_exactly(tmp_path: Path, wheels: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "job"\nversion = "0"\nrequires-python = ">=3.8"\n'
        'dependencies = ["halpkgb"]\n'
    )
    subprocess.run(
        [pyenvs.find_uv() or "uv", "lock", "--project", str(project)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    files = {n: (project / n).read_text() for n in ("pyproject.toml", "uv.lock")}
    env = make_python_env(files)
    pin = PythonEnvPin(kind=env.kind, sha256=env.sha256, files=dict(env.files))
    active = asyncio.run(_envs(tmp_path, {1}).activate(1, pin, {}))
    assert _python(active, "import halpkga, halpkgb; print(halpkga.VERSION)") == "2.0"


def test_pips_index_settings_reach_uv_as_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv reads neither PIP_* nor pip.conf: the node's pip settings become uv's flags,
    with pip's best match over every index; uv's own settings, when any, win."""
    for name in list(os.environ):
        if name.startswith(("UV_", "PIP_")):
            monkeypatch.delenv(name)
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror/simple\nfind-links = /wheels\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    python = sys.executable
    assert pyenvs.uv_index_flags(python) == [
        "--default-index",
        "https://mirror/simple",
        "--find-links",
        "/wheels",
    ]
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://b/simple file:///c")
    monkeypatch.setenv("PIP_FIND_LINKS", "/other")  # the variable over the file, as pip
    assert pyenvs.uv_index_flags(python) == [
        *("--default-index", "https://mirror/simple"),
        *("--index", "https://b/simple", "--index", "file:///c"),
        *("--index-strategy", "unsafe-best-match"),
        *("--find-links", "/other"),
    ]
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://uv/simple")
    assert pyenvs.uv_index_flags(python) == []
