"""``--switches`` and ``--topology`` from the command line, ``#SBATCH`` lines and
``SBATCH_REQ_SWITCH``, through to the JobSpec the server builds (``api.convert``)."""

from __future__ import annotations

import pytest

from hal.api.convert import to_spec
from hal.compat.sbatch import parse_sbatch
from hal.core.errors import InvalidRequest
from hal.core.job import TopologyConstraint
from hal.wire.submit import JobSubmit, non_defaults

NOW = 1_800_000_000.0


def _job(
    *argv: str, script: str = "#!/bin/sh\ntrue\n", env: dict[str, str] | None = None
) -> JobSubmit:
    return parse_sbatch(
        list(argv), environ=env or {}, cwd="/w", read_stdin=lambda: script, now=NOW
    ).job


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--switches=2"], {"switches": "2"}),
        (["--switches", "2@1:00:00"], {"switches": "2@1:00:00"}),
        (["--topology=required=rack"], {"topology": "required=rack"}),
        (["--topology", "preferred=leaf"], {"topology": "preferred=leaf"}),
    ],
)
def test_command_line(argv: list[str], expected: dict[str, str]) -> None:
    fields = non_defaults(_job(*argv))
    assert {k: fields[k] for k in expected} == expected


def test_directives_and_environment_with_slurm_precedence() -> None:
    script = "#!/bin/sh\n#SBATCH --switches=2@1:00:00\n#SBATCH --topology required=leaf\ntrue\n"
    job = _job(script=script)
    assert (job.switches, job.topology) == ("2@1:00:00", "required=leaf")
    job = _job(script=script, env={"SBATCH_REQ_SWITCH": "1@5"})
    assert job.switches == "1@5"  # the environment beats #SBATCH
    assert _job("--switches=3", script=script, env={"SBATCH_REQ_SWITCH": "1"}).switches == "3"


@pytest.mark.parametrize("argv", [["--switches=0"], ["--switches=2@x"], ["--topology=rack"]])
def test_bad_values_fail_before_sending(argv: list[str]) -> None:
    with pytest.raises(InvalidRequest):
        _job(*argv)


def test_server_side_spec_fields() -> None:
    spec = to_spec(
        JobSubmit(script="#!/bin/sh\n", switches="2@1:00:00", topology="required=rack"),
        "alice",
        max_array_size=10,
    )
    assert spec.switches == 2 and spec.switch_wait_s == 3600
    assert spec.topology == TopologyConstraint("rack", required=True)
    plain = to_spec(JobSubmit(script="#!/bin/sh\n"), "alice", max_array_size=10)
    assert (plain.switches, plain.switch_wait_s, plain.topology) == (0, None, None)
    with pytest.raises(InvalidRequest) as err:
        to_spec(JobSubmit(script="#!/bin/sh\n", switches="0"), "alice", max_array_size=10)
    assert err.value.field == "switches"
