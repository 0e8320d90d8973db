"""The ``hal`` argument parser: help text, the native ``show`` command, and which
modules a command's parser imports."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from hal.cli.parser import COMMAND_MODULES, build_parser
from hal.compat.names import SLURM_COMMANDS


def test_help_lists_every_slurm_command() -> None:
    description = build_parser().description or ""
    assert {"sprio", "sshare", "srun"} <= set(SLURM_COMMANDS)
    for name in SLURM_COMMANDS:
        assert name in description
    assert "hal prio" in description


@pytest.mark.parametrize("argv", [["show", "42"], ["show", "job", "42"]])
def test_show_takes_an_optional_literal_job(argv: list[str]) -> None:
    ns = build_parser().parse_args([*argv, "--json"])
    assert (ns.job_id, ns.json) == ("42", True)


def test_show_refuses_another_kind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["show", "node", "42"])
    assert "invalid choice: 'node'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["server", "--port", "0"], "--port: '0' is not a whole number >= 1"),
        (["up", "--port", "70000"], "'70000' is not a TCP port"),
        (["up", "--agents", "-1"], "--agents: '-1' is not a whole number >= 0"),
        (["up", "--cpus-per-agent", "0"], "--cpus-per-agent: '0'"),
        (["agent", "--cpus", "0"], "--cpus: '0' is not a whole number >= 1"),
        (["agent", "--gpus", "two"], "--gpus: 'two'"),
    ],
)
def test_ports_and_counts_out_of_range_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """0 was read as "not given" (port 8470, the host's CPUs) and negatives failed later."""
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(argv)
    assert done.value.code == 2 and words in capsys.readouterr().err


def test_ports_and_counts_in_range_are_taken() -> None:
    ns = build_parser().parse_args(["agent", "--cpus", "4", "--gpus", "0"])
    assert (ns.cpus, ns.gpus) == (4, 0)
    assert build_parser().parse_args(["server", "--port", "65535"]).port == 65535


def test_harmonic_graph_takes_a_job_or_a_user_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    ns = build_parser().parse_args(["harmonic", "graph", "--job", "12_3", "--json"])
    assert (ns.job, ns.user, ns.json, ns.limit) == ("12_3", None, True, 1000)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["harmonic", "graph", "--job", "1", "--user", "ann"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["harmonic", "graph", "--limit", "0"])
    assert "'0' is not a whole number from 1 to 100000" in capsys.readouterr().err


def _registered(parser: argparse.ArgumentParser) -> list[str]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(subs[0].choices)


def test_each_command_is_registered_by_its_module_in_the_table() -> None:
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"hal.cli.{module}").add_commands(sub)
        assert set(sub.choices) == {n for n, m in COMMAND_MODULES.items() if m == module}
    every = _registered(build_parser())
    assert every == ["up", "server", "agent", *COMMAND_MODULES]
    assert _registered(build_parser(["nosuchcommand"])) == every


@pytest.mark.parametrize(
    ("argv", "own"),
    [
        (["agent", "--cpus", "2"], "local"),
        (["nodes"], "native"),
        (["artifact", "list"], "artifacts"),
    ],
)
def test_a_command_imports_its_own_module_not_the_others(argv: list[str], own: str) -> None:
    """`hal agent` and each native command start without importing the other commands'
    modules (the artifact commands' import pydantic's models of the artifact plane; the
    benchmarks', the simulator). The agent's options include the cache's metrics
    options and the server's the logging options, from those two modules."""
    code = (
        "import sys; from hal.cli.parser import build_parser; "
        f"build_parser({argv!r}).parse_known_args({argv!r}); "
        "print(' '.join(m for m in sys.modules if m.startswith('hal.cli.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = set(done.stdout.split())
    others = {f"hal.cli.{m}" for m in COMMAND_MODULES.values()} - {
        f"hal.cli.{own}",
        "hal.cli.cache",
        "hal.cli.observe",
    }
    assert f"hal.cli.{own}" in imported
    assert not imported & others, sorted(imported & others)
