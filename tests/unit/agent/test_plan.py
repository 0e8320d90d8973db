"""How a spooled batch script is executed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.agent.plan import LaunchError, build_step_plan, script_argv
from hal.wire.agent import Launch


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("echo hi\n", ("/bin/sh", "/s")),
        ("#!/bin/bash\necho\n", ("/bin/bash", "/s")),
        ("#!/usr/bin/env python3\n", ("/usr/bin/env", "python3", "/s")),
        ("#! /bin/bash -e -x\n", ("/bin/bash", "-e -x", "/s")),  # one argument, as the kernel
        ("#!\n", ("/bin/sh", "/s")),
        ("#!/bin/sh", ("/bin/sh", "/s")),
    ],
)
def test_script_argv(script: str, argv: tuple[str, ...]) -> None:
    assert script_argv(script, "/s") == argv


def test_relative_interpreter_is_refused() -> None:
    with pytest.raises(LaunchError):
        script_argv("#!bash\n", "/s")


def test_the_script_arguments_follow_the_spooled_script(tmp_path: Path) -> None:
    """``sbatch job.sh "a b" -x``: the interpreter runs the spooled copy, then the words."""
    launch = Launch(
        job_id=7, attempt=0, name="j", user="u", script="#!/bin/bash -e\ntrue\n",
        script_args=["a b", "-x"], workdir="/", environment={}, stdout="", stderr=None,
        time_limit_seconds=0, memory_bytes=0, cpus=1, nodes=["n1"], node_index=0,
    )  # fmt: skip
    plan = build_step_plan(launch, node="n1", job_dir=str(tmp_path), unknown_users_as_agent=True)
    assert plan.argv == ("/bin/bash", "-e", str(tmp_path / "slurm_script"), "a b", "-x")


def test_the_spooled_script_is_named_as_slurm_names_it(tmp_path: Path) -> None:
    """Slurm 22.05.8 runs a batch script as ``<spool>/job<ID>/slurm_script`` (its ``$0``);
    scripts that check ``basename $0`` saw ``script`` under HAL."""
    launch = Launch(
        job_id=7, attempt=0, name="j", user="u", script="#!/bin/sh\necho $0\n",
        script_args=[], workdir="/", environment={}, stdout="", stderr=None,
        time_limit_seconds=0, memory_bytes=0, cpus=1, nodes=["n1"], node_index=0,
    )  # fmt: skip
    plan = build_step_plan(launch, node="n1", job_dir=str(tmp_path), unknown_users_as_agent=True)
    assert Path(plan.argv[-1]).name == "slurm_script"
