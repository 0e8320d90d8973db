"""``hal bench submit --python``: another install's commands import that install's HAL,
not the one on this process's ``PYTHONPATH``."""

from __future__ import annotations

from typing import Any

import pytest

from hal.bench.submit import _command_env


class Server:
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": "/src", "PYTHONDONTWRITEBYTECODE": "1", "HAL_URL": "http://h:1"}


def test_this_interpreter_keeps_pythonpath_and_another_drops_it() -> None:
    server: Any = Server()
    assert _command_env(server) == {"PYTHONPATH": "/src", "HAL_URL": "http://h:1"}
    assert _command_env(server, own_install=True) == {"HAL_URL": "http://h:1"}


def test_the_option_reaches_the_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    from hal.bench import submit
    from hal.cli.main import main

    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(submit, "run_submit_bench", lambda *args: seen.append(args) or {})
    assert main(["bench", "submit", "--python", "/opt/venv/bin/python", "--json"]) == 0
    assert seen == [(20_000, 1_000, 20, "/opt/venv/bin/python")]
