"""The systemd units under deploy/systemd: valid for ``systemd-analyze verify``, their
command lines (with the example environment files expanded as systemd expands them)
accepted by ``hal``'s own parser, and their restart rules in step with ``hal``'s exit
codes (a fenced server's "another server took the lead" restarts, to stand by; a bad
option or a refused agent token does not)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hal.cli.main import EXIT_CODES
from hal.cli.parser import build_parser

UNITS = Path(__file__).resolve().parents[3] / "deploy" / "systemd"
UNIT_FILES = sorted(UNITS.glob("*.service"))
INSTALLED_HAL = "/opt/hal/bin/hal"  # where docs/admin/install.md installs it
needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze not installed (Debian package 'systemd')",
)


def _unit(path: Path) -> dict[str, dict[str, str]]:
    """The unit's sections, as systemd reads them: ``Key=value`` lines; a key given twice
    (EnvironmentFile=) keeps both values, one a line."""
    sections: dict[str, dict[str, str]] = {}
    section: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
        elif line and not line.startswith(("#", ";")):
            key, value = line.split("=", 1)
            section[key] = f"{section[key]}\n{value}" if key in section else value
    return sections


def _env(*names: str) -> dict[str, str]:
    """The example environment files' assignments, commented-out ones included (they show
    options an administrator may switch on, which must parse too)."""
    env: dict[str, str] = {}
    for name in names:
        for line in (UNITS / name).read_text().splitlines():
            found = re.fullmatch(r"#?([A-Z_]+)=(.*)", line.strip())
            if found:
                env[found[1]] = found[2]
    return env


def _expand(command: str, env: dict[str, str], instance: str) -> list[str]:
    """``ExecStart=`` as systemd runs it: ``${VAR}`` one word, ``$VAR`` split on blanks
    (nothing when empty), ``%i`` the instance."""
    words: list[str] = []
    for word in command.replace("%i", instance).split():
        braced = re.fullmatch(r"\$\{([A-Z_]+)\}", word)
        bare = re.fullmatch(r"\$([A-Z_]+)", word)
        if braced:
            words.append(env[braced[1]])
        elif bare:
            words.extend(env.get(bare[1], "").split())
        else:
            words.append(word)
    return words


def test_every_hal_service_has_a_unit() -> None:
    names = {p.name for p in UNIT_FILES}
    assert names == {
        "hal-server.service",
        "hal-agent.service",
        "hal-cache-control-plane.service",
        "hal-cache-node@.service",
    }


@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: p.name)
def test_the_command_line_is_one_hal_accepts(path: Path) -> None:
    service = _unit(path)["Service"]
    env = _env("hal.env.example", "cache-node.env.example")
    argv = _expand(service["ExecStart"], env, instance="rack1")
    assert argv[0] == INSTALLED_HAL
    ns, unknown = build_parser(argv[1:]).parse_known_args(argv[1:])
    assert unknown == [], f"{path.name}: hal does not know {unknown}"
    assert ns.func is not None
    for name in service.get("EnvironmentFile", "").splitlines():
        assert name.lstrip("-").startswith("/etc/hal/"), name


def _exit_codes(service: dict[str, str]) -> set[int]:
    return {int(code) for code in service.get("RestartPreventExitStatus", "").split()}


def test_a_fenced_server_restarts_to_stand_by() -> None:
    unit = _unit(UNITS / "hal-server.service")
    service = unit["Service"]
    assert service["Restart"] == "always" and service["User"] == "hal"
    assert unit["Unit"]["StartLimitIntervalSec"] == "0"  # never gives up
    # a leader fenced after a takeover exits as a conflict: started again, it stands by
    # (a standby itself keeps running: no restart loop); --no-standby would defeat that
    assert EXIT_CODES["conflict"] not in _exit_codes(service)
    assert "--no-standby" not in service["ExecStart"]
    assert EXIT_CODES["invalid_request"] in _exit_codes(service)  # no restart mends those
    assert "postgresql.service" in unit["Unit"]["After"].split()


def test_the_agent_runs_as_root_and_its_stop_leaves_the_jobs_running() -> None:
    service = _unit(UNITS / "hal-agent.service")["Service"]
    assert service["User"] == "root"
    assert service["KillMode"] == "process"
    # a refused token (3) and a bad option (2) stop it; a server away does not
    assert {EXIT_CODES["unauthenticated"], EXIT_CODES["invalid_request"]} <= _exit_codes(service)
    for sandbox in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"):
        assert sandbox not in service, f"the jobs would inherit {sandbox}="


@needs_systemd_analyze
@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: p.name)
def test_systemd_analyze_verify_finds_nothing(path: Path, tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this hal
    hal = Path(sys.executable).with_name("hal")
    assert hal.exists(), f"no hal beside {sys.executable}"
    copy = tmp_path / path.name
    copy.write_text(path.read_text().replace(INSTALLED_HAL, str(hal)))
    target = str(copy) + (f":{path.name.replace('@', '@rack1')}" if "@." in path.name else "")
    done = subprocess.run(["systemd-analyze", "verify", target], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    # it exits 0 after warnings ("Unknown key ...", "Failed to parse ..."): any line is one
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (
        done.stdout + done.stderr
    )
