"""``hal bench sim``: it finds an interpreter AccaSim can run on only if it really
starts (a pyenv shim on PATH that exits 127 made the peer's run fail before it began),
and it judges only whole traces against their speed targets."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from hal.bench import sim
from hal.core.errors import InvalidRequest
from hal.testing.traces import TEST_TRACES


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_shim_that_cannot_start_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    _script(shims / "python3.9", "exit 127")
    real = tmp_path / "pyenv" / "versions" / "3.9.18" / "bin"
    real.mkdir(parents=True)
    _script(real / "python3.9", "exit 0")
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert sim._accasim_python() == str(real / "python3.9")


def test_none_when_nothing_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    _script(shims / "python3.8", "exit 127")
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "empty"))
    assert sim._accasim_python() is None


def test_the_interpreter_found_here_is_one_accasim_runs_on() -> None:
    found = sim._accasim_python()
    if found is None:
        pytest.skip("needs python3.9 or python3.8 (AccaSim's): the bench records why instead")
    out = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() in ("(3, 9)", "(3, 8)")


def test_a_cut_trace_has_no_verdict_on_the_whole_traces_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sim, "TRACES", TEST_TRACES)  # SDSC-SP2 is among the tests' own
    cut = sim.run_hal("sdsc-sp2", first_jobs=300)
    assert cut["jobs"] == 300
    assert cut["meets_target"] is None  # the 30 s target is for the whole trace
    assert cut["wall_s"] > 0


def test_a_trace_that_is_not_there_is_named_with_where_to_put_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full traces live outside the repository: without them the bench says which
    file it wanted, where it looked and how to point it elsewhere (it said only that
    the file could not be read)."""
    monkeypatch.setattr(sim, "TRACES", tmp_path)
    with pytest.raises(InvalidRequest) as err:
        sim.run_hal("cea-curie", first_jobs=10)
    assert err.value.message.startswith(
        f"the trace CEA-Curie-2011-2.1-cln.swf.gz is not in {tmp_path}: "
    )
    assert "HAL_TRACES" in err.value.message
