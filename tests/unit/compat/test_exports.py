"""srun's --export, each case as Slurm 22.05.8's srun gave it on its peer;
sbatch's own reading is in test_sbatch_parse.py."""

from __future__ import annotations

import pytest

from hal.compat.exports import export_environment, exports_all, step_environment
from hal.slurm.job_variables import DEFAULT_PATH

SRUN_ENV = {
    "PATH": "/opt/venv/bin:/usr/bin",
    "HOME": "/home/a",
    "USER": "a",
    "LD_LIBRARY_PATH": "/opt/lib",
    "FOO": "foo",
    "SLURM_JOB_ID": "7",
    "SLURMD_NODENAME": "n1",
    "HAL_URL": "http://ctl:8470",
    "TMPDIR": "/tmp",
}
# what every filtered step keeps: SLURM*, HAL_*, TMPDIR, the caller's identity, a PATH
KEPT = {
    "SLURM_JOB_ID": "7",
    "SLURMD_NODENAME": "n1",
    "HAL_URL": "http://ctl:8470",
    "TMPDIR": "/tmp",
    "HOME": "/home/a",
    "USER": "a",
    "PATH": DEFAULT_PATH,
}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("NONE", KEPT),
        ("none", KEPT),
        ("", KEPT),
        ("NONE,FOO=f3", KEPT),  # names after NONE: ignored, as Slurm's srun
        ("FOO", {**KEPT, "FOO": "foo"}),
        ("FOO,BAR=b2", {**KEPT, "FOO": "foo", "BAR": "b2"}),
        ("MISSING", KEPT),
        ("PATH", {**KEPT, "PATH": "/opt/venv/bin:/usr/bin"}),
        ("FOO=a,b", {**KEPT, "FOO": "a"}),  # (b is a name: unset, so nothing)
        ("ALL", SRUN_ENV),
        ("all", SRUN_ENV),
        ("ALL,FOO=f2,NEW=n", {**SRUN_ENV, "NEW": "n"}),  # srun's own FOO wins
    ],
)
def test_step_environment(spec: str, expected: dict[str, str]) -> None:
    assert step_environment(spec, SRUN_ENV) == expected
    assert exports_all(spec) == (spec.upper().startswith("ALL"))


def test_sbatch_none_keeps_what_reaches_the_control_plane() -> None:
    """A job's srun and scontrol find the server through HAL_URL and HAL_TOKEN: kept
    under sbatch --export=NONE as the SLURM_* variables are."""
    env = {"HAL_URL": "http://ctl:8470", "HAL_TOKEN": "t", "FOO": "1", "SLURM_CONF": "/c"}
    assert export_environment("NONE", env) == {
        "HAL_URL": "http://ctl:8470",
        "HAL_TOKEN": "t",
        "SLURM_CONF": "/c",
    }
