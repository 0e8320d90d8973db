"""Shims must never shadow a real Slurm installation unless forced."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hal.compat.shims import SHIM_COMMANDS, install_shims, is_shim, shim_text
from hal.core.errors import Conflict


def test_installs_executable_shims(tmp_path: Path) -> None:
    paths = install_shims(tmp_path / "bin", path_env="")
    assert [p.name for p in paths] == list(SHIM_COMMANDS)
    for path in paths:
        assert path.stat().st_mode & stat.S_IXUSR
        assert is_shim(path)
        assert f' {path.name} "$@"\n' in path.read_text()
    assert sys.executable in paths[0].read_text()


def test_a_shim_runs_hals_command_with_its_arguments(tmp_path: Path) -> None:
    """What a workflow tool does: run ``sbatch``/``squeue`` by name, arguments and exit
    code passed through."""
    install_shims(tmp_path, path_env="")
    done = subprocess.run(
        [tmp_path / "squeue", "--version"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "slurm 22.05.8 (HAL)\n")
    done = subprocess.run(
        [tmp_path / "sbatch", "--bogus"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stderr.startswith("sbatch: error: unrecognized option '--bogus'")


def test_reinstall_replaces_our_own_shims(tmp_path: Path) -> None:
    install_shims(tmp_path, path_env="")
    install_shims(tmp_path, path_env=str(tmp_path))  # our shims on PATH are fine


def _real(directory: Path, name: str = "sbatch") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\necho real slurm\n")
    path.chmod(0o755)
    return path


def test_refuses_real_slurm_in_target(tmp_path: Path) -> None:
    real = _real(tmp_path)
    with pytest.raises(Conflict, match="real Slurm commands exist"):
        install_shims(tmp_path, path_env="")
    assert real.read_text() == "#!/bin/sh\necho real slurm\n"
    assert not (tmp_path / "squeue").exists()  # nothing written when refusing


def test_refuses_real_slurm_on_path(tmp_path: Path) -> None:
    real = _real(tmp_path / "usr-bin", "squeue")
    with pytest.raises(Conflict, match=str(real)):
        install_shims(tmp_path / "shims", path_env=os.pathsep.join([str(real.parent)]))


def test_force_installs_anyway(tmp_path: Path) -> None:
    _real(tmp_path)
    install_shims(tmp_path, force=True, path_env="")
    assert is_shim(tmp_path / "sbatch")


def test_shim_text_quotes_the_interpreter() -> None:
    text = shim_text("squeue", "/opt/my python/bin/python")
    assert "exec '/opt/my python/bin/python' -c 'import sys; " in text


def test_shims_run_the_interpreter_they_are_given(tmp_path: Path) -> None:
    """(``hal bench submit --python``: another install's start-up)"""
    paths = install_shims(tmp_path, path_env="", python="/opt/venv/bin/python")
    for path in paths:
        assert path.read_text().splitlines()[-1].startswith("exec /opt/venv/bin/python -c ")
