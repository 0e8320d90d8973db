"""``hal user add NAME --agent [--nodes LIST]``: a token for node agents, printed once with
where to put it; ``hal user list`` and ``hal user token`` say it is an agent's; the event
trail names it. ``hal agent --token`` warns that ``ps`` shows the token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hal.cli.main import main
from hal.testing.live import LiveServer


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_user_add_agent_prints_an_agent_token_bound_to_its_nodes(
    env: LiveServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(capsys, "user", "add", "rack7", "--agent", "--nodes", "gpu[1-2],gpu3")
    assert (code, err) == (0, "")
    first, second = out.splitlines()
    assert first == "created user rack7 (agent: gpu[1-3])"
    prefix = (
        "token (shown once; put it in a file only root reads, e.g. /etc/hal/agent.token, "
        "for `hal agent --token-file`): "
    )
    assert second.startswith(prefix + "hal_")
    assert "rack7 (agent: gpu[1-3])" in run(capsys, "user", "list")[1].splitlines()
    code, out, _ = run(capsys, "user", "token", "rack7")
    assert code == 0 and out.startswith("new token for user rack7 (agent: gpu[1-3]);")
    monkeypatch.setenv("HAL_TOKEN", out.splitlines()[1].removeprefix(prefix))
    code, out, err = run(capsys, "queue")
    assert code == 3 and out == ""
    assert "rack7's token is an agent token: only the agent channel" in err
    with env.client() as admin:
        added = [e.data for e in admin.events(follow=False) if e.kind == "user.added"]
    assert {"name": "rack7", "by": "admin", "admin": False, "agent": True, "nodes": "gpu[1-3]"} in (
        added
    )


def test_an_agent_token_for_any_node_and_refusals(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "user", "add", "anynode", "--agent")
    assert code == 0 and out.startswith("created user anynode (agent: any node)\n")
    code, out, err = run(capsys, "user", "add", "both", "--agent", "--admin")
    assert (code, out) == (2, "")
    assert "an administrator or an agent, not both: leave out --admin or --agent" in err
    code, _, err = run(capsys, "user", "add", "nodesonly", "--nodes", "n1")
    assert code == 2 and "add --agent, or leave out --nodes" in err


def hal_agent(*args: str) -> subprocess.CompletedProcess[str]:
    """``hal agent ARGS`` with a bad --metrics-listen: it stops after reading its token."""
    cmd = [sys.executable, "-m", "hal.cli.main", "agent", "--server", "http://127.0.0.1:9"]
    cmd += [*args, "--metrics-listen", "host:notaport"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_agent_token_on_the_command_line_warns_that_ps_shows_it() -> None:
    done = hal_agent("--token", "hal_x")
    assert "warning: --token shows the token to every user of this host (`ps`)" in done.stderr
    assert "--metrics-listen: " in done.stderr  # it went on


def test_an_unreadable_token_file_is_one_clear_line(tmp_path: Path) -> None:
    done = hal_agent("--token-file", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert f"cannot read --token-file {tmp_path / 'missing'} (No such file or directory)" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and "warning" not in done.stderr
