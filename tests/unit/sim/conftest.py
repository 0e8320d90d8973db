from __future__ import annotations

from pathlib import Path

import pytest


def swf_text(jobs: list[tuple[int, float, float, int, float]], procs: int = 4) -> str:
    """An SWF file: (id, submit, run, procs, requested) per job, the rest -1."""
    lines = [f"; MaxProcs: {procs}", f"; MaxNodes: {procs}", "; Note: a hand-made micro trace"]
    for jid, submit, run, size, req in jobs:
        f = [jid, submit, -1, run, size, -1, -1, size, req, -1, 1, 1, 1, -1, 1, 1, -1, -1]
        lines.append(" ".join(str(int(v)) for v in f))
    return "\n".join(lines) + "\n"


@pytest.fixture
def write_trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    def write(jobs: list[tuple[int, float, float, int, float]], procs: int = 4) -> Path:
        path = tmp_path / "micro.swf"
        path.write_text(swf_text(jobs, procs))
        return path

    return write
