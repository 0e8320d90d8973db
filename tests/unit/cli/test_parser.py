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
