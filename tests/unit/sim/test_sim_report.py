"""``hal sim run --save`` then ``hal sim report``: the saved run comes back, and a file
that is no saved run is refused with a message, not a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hal.cli.main import main

JOBS = [(1, 0.0, 10, 2, 20), (2, 5.0, 10, 3, 20), (3, 6.0, 30, 1, 40)]


def test_a_saved_run_makes_a_report(write_trace: Any, tmp_path: Path, capsys: Any) -> None:
    saved = tmp_path / "run.npz"
    assert main(["sim", "run", str(write_trace(JOBS)), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    assert main(["sim", "report", str(saved)]) == 0
    page = Path(capsys.readouterr().out.strip())
    assert page == tmp_path / "run" / "index.html"
    assert "mean_wait_s" in page.read_text()
    assert (tmp_path / "run" / "wait_cdf.png").stat().st_size > 0


def test_a_result_saved_without_a_suffix_gets_its_own_folder(
    write_trace: Any, tmp_path: Path, capsys: Any
) -> None:
    """The default folder is the result's name less its suffix: with none, that was the
    result itself (FileExistsError)."""
    saved = tmp_path / "myrun"
    assert main(["sim", "run", str(write_trace(JOBS)), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    assert main(["sim", "report", str(saved)]) == 0
    page = Path(capsys.readouterr().out.strip())
    assert page.is_file() and page.parent != saved and saved.is_file()


def _truncated(path: Path, tmp_path: Path, write_trace: Any) -> None:
    saved = tmp_path / "whole.npz"
    assert main(["sim", "run", str(write_trace(JOBS)), "--save", str(saved), "--json"]) == 0
    path.write_bytes(saved.read_bytes()[:300])


@pytest.mark.parametrize(
    "content",
    [b"garbage\n", b"; MaxProcs: 4\n1 0 -1 10 2 -1 -1 2 20 -1 1 1 1 -1 1 1 -1 -1\n", None],
    ids=["garbage", "an SWF file", "truncated"],
)
def test_a_file_that_is_no_saved_run_is_refused(
    write_trace: Any, tmp_path: Path, capsys: Any, content: bytes | None
) -> None:
    path = tmp_path / "bad.npz"
    if content is None:
        _truncated(path, tmp_path, write_trace)
    else:
        path.write_bytes(content)
    capsys.readouterr()
    assert main(["sim", "report", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"hal sim: cannot read {path}: not a run saved by `hal sim run --save`" in err
    assert "pickle" not in err


def test_a_missing_result_is_refused(tmp_path: Path, capsys: Any) -> None:
    assert main(["sim", "report", str(tmp_path / "none.npz")]) == 2
    assert "No such file or directory" in capsys.readouterr().err
