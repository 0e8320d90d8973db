"""srun --export on a real server with real agents, as Slurm 22.05.8 runs it (compared
on its peer): the tasks of a step on the batch node and of one on other nodes
get the same variables, and ``sbatch --export`` is every step's default through
``SLURM_EXPORT_ENV``. Before, HAL's srun took --export and ignored it."""

from __future__ import annotations

from pathlib import Path

from two_agents import (
    SRUN,
    state,
    submit,
)

from hal.slurm.job_variables import DEFAULT_PATH
from hal.testing.live import LiveServer, wait_until

SHOW = "sh -c 'echo $0 FOO=${FOO-unset} BAR=${BAR-unset} NEW=${NEW-unset} SUB=${SUB-unset} P=$PATH'"


def lines(live: LiveServer, tmp_path: Path, body: str, *args: str) -> list[str]:
    job_id = submit(live, tmp_path, "export FOO=foo BAR=bar\n" + body, "-o", "out.txt", *args)
    wait_until(lambda: state(live, job_id) == "COMPLETED", 60, message="the job's end")
    return (tmp_path / "out.txt").read_text().splitlines()


def test_export_modes_here_and_on_other_nodes(server: LiveServer, tmp_path: Path) -> None:
    body = "".join(
        f"{SRUN} {where} --export={spec} {SHOW} {label}\n"
        for where, spec, label in (
            ("-n1", "NONE", "none"),
            ("-n1", "FOO,BAR=b2", "names"),
            ("-n1", "NONE,FOO=f3", "none-names"),
            ("-n1", "ALL,FOO=f2,NEW=n", "all"),
            ("-N2 -n2", "NONE", "away-none"),
            ("-N2 -n2", "FOO", "away-names"),
            ("-N2 -n2", "ALL,NEW=n", "away-all"),
        )
    )
    out = lines(server, tmp_path, body, "-N2", "-n2", "--export=ALL,SUB=sub")
    shown = {line.split()[0]: line.split()[1:] for line in out}
    unset = ["FOO=unset", "BAR=unset", "NEW=unset", "SUB=unset", f"P={DEFAULT_PATH}"]
    assert shown["none"] == unset, out
    assert shown["none-names"] == unset, out  # (Slurm's srun ignores names after NONE)
    assert shown["away-none"] == unset, out  # (not the job's submitted SUB either)
    assert shown["names"] == ["FOO=foo", "BAR=b2", "NEW=unset", "SUB=unset", f"P={DEFAULT_PATH}"]
    assert shown["away-names"][:4] == ["FOO=foo", "BAR=unset", "NEW=unset", "SUB=unset"]
    # ALL: srun's own values win over those listed (FOO stays foo), new names are added
    assert shown["all"][:4] == ["FOO=foo", "BAR=bar", "NEW=n", "SUB=sub"], out
    assert shown["away-all"][:4] == ["FOO=foo", "BAR=bar", "NEW=n", "SUB=sub"], out
    assert len(out) == 10, out  # each step's tasks: 1 + 1 + 1 + 1 + 2 + 2 + 2


def test_sbatch_export_is_every_steps_default(server: LiveServer, tmp_path: Path) -> None:
    """``sbatch --export=NONE``: SLURM_EXPORT_ENV=NONE in the job, so srun's tasks lose the
    script's own exports (Slurm's known trap) until srun is given --export=ALL or
    SLURM_EXPORT_ENV=ALL."""
    body = (
        "echo env=$SLURM_EXPORT_ENV\n"
        f"{SRUN} -n1 {SHOW} plain\n"
        f"{SRUN} -n1 --export=ALL {SHOW} all\n"
        f"SLURM_EXPORT_ENV=ALL {SRUN} -n1 {SHOW} variable\n"
    )
    out = lines(server, tmp_path, body, "-N1", "--export=NONE")
    assert out[0] == "env=NONE"
    assert out[1].split()[:3] == ["plain", "FOO=unset", "BAR=unset"], out
    assert out[2].split()[:3] == ["all", "FOO=foo", "BAR=bar"], out
    assert out[3].split()[:3] == ["variable", "FOO=foo", "BAR=bar"], out
