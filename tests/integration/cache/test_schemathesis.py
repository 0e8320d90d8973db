"""Schemathesis against a running control plane, driven by the OpenAPI contract itself."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cachetree import ControlPlane

from hal.cache.app import CONTRACT

CONFIG = Path(__file__).with_name("schemathesis.toml")


def _schemathesis() -> str | None:
    exe = Path(sys.executable).with_name("schemathesis")
    return str(exe) if exe.exists() else shutil.which("schemathesis")


@pytest.mark.slow  # every operation of the contract, generated cases: about a minute
def test_control_plane_conforms_to_the_openapi_contract(tmp_path: Path) -> None:
    """Every operation, positive and negative data, plus stateful links: no 5xx, JSON
    content types, response shapes as specified (exceptions documented in schemathesis.toml)."""
    exe = _schemathesis()
    if exe is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")
    cp = ControlPlane(tmp_path)
    cp.start()
    try:
        run = subprocess.run(
            [
                exe,
                "--config-file",
                str(CONFIG),
                "run",
                str(CONTRACT),
                "--url",
                f"http://127.0.0.1:{cp.port}",
                "--max-examples",
                "25",
                "--seed",
                "7",
                "--request-timeout",
                "10",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        cp.kill()
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
