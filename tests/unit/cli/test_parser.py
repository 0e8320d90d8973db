"""The ``hal`` argument parser: help text and the native ``show`` command."""

from __future__ import annotations

import pytest

from hal.cli.parser import build_parser
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
