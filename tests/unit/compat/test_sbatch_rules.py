"""``--near``/``--apart`` in sbatch (``hal submit``), ``#SBATCH`` and ``#HAL`` lines,
salloc and srun's own allocation: checked before anything is sent, repeated options and
script lines adding up, parsed by the server into the spec, and shown by ``scontrol show
job`` and ``hal show``."""

from __future__ import annotations

import pytest
from compat_fakes import job

from hal.api.convert import to_spec
from hal.cli.show import job_lines
from hal.compat.options import parse_options
from hal.compat.salloc_options import parse_salloc
from hal.compat.sbatch import parse_sbatch
from hal.compat.scontrol import job_record
from hal.compat.srun import OPTIONS, parse_command
from hal.compat.srun_alloc import allocation_argv
from hal.core.errors import InvalidRequest
from hal.core.job_rules import JobRule
from hal.wire.submit import JobSubmit, non_defaults


def _parse(*argv: str, script: str = "#!/bin/bash\necho hi\n") -> dict[str, object]:
    request = parse_sbatch(list(argv), environ={}, cwd="/work", read_stdin=lambda: script, now=0.0)
    return non_defaults(request.job)


def test_options_and_script_lines_add_up_and_the_command_line_wins() -> None:
    assert _parse("--near=job:12@leaf", "--apart", "name:db")["near"] == ["job:12@leaf"]
    assert _parse("--apart", "name:db")["apart"] == ["name:db"]
    assert "near" not in _parse() and "apart" not in _parse()
    script = "#!/bin/bash\n#SBATCH --near=job:1\n#HAL --near preferred=name:db@rack\necho hi\n"
    assert _parse(script=script)["near"] == ["job:1,preferred=name:db@rack"]
    assert _parse("--near=job:2", "--near=job:3", script=script)["near"] == ["job:2,job:3"]
    assert _parse("--apart=job:4", script="#!/bin/sh\n#HAL --apart=job:5\n")["apart"] == ["job:4"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--near=12"], "invalid --near '12': the target is job:ID or name:NAME"),
        (["--apart=job:x"], "invalid --apart 'job:x': job id 'x' is not a job id"),
        (["--near=job:1@"], "nothing after @"),
    ],
)
def test_a_bad_rule_is_refused_before_sending(argv: list[str], says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        _parse(*argv, "--wrap", "true")


def test_a_bad_rule_on_a_hal_line_is_refused_too() -> None:
    with pytest.raises(InvalidRequest, match="invalid --near 'host:n1'"):
        _parse(script="#!/bin/sh\n#HAL --near=host:n1\ntrue\n")


def test_the_server_parses_them_into_the_spec() -> None:
    body = JobSubmit(script="#!/bin/sh\n", near=["job:3@leaf", "name:db"], apart=["job:4"])
    spec = to_spec(body, "alice", max_array_size=10)
    assert spec.near == (JobRule(job_id=3, level="leaf"), JobRule(name="db"))
    assert spec.apart == (JobRule(job_id=4),)


def test_the_server_refuses_contradicting_and_malformed_rules() -> None:
    with pytest.raises(InvalidRequest, match="no node is both"):
        to_spec(
            JobSubmit(script="#!/bin/sh\n", near=["job:3"], apart=["job:3"]), "a", max_array_size=1
        )
    with pytest.raises(InvalidRequest, match="invalid --apart 'job:'") as err:
        to_spec(
            JobSubmit(script="#!/bin/sh\n", apart=["job:"]), "a", max_array_size=1, where="jobs[2]."
        )
    assert err.value.field == "jobs[2].apart"


def test_salloc_takes_them() -> None:
    request = parse_salloc(["--near=job:9@node", "--apart=name:x"], environ={}, cwd="/", now=0.0)
    assert (request.job.near, request.job.apart) == (["job:9@node"], ["name:x"])


def test_srun_passes_them_to_its_own_allocation_and_refuses_them_in_a_job() -> None:
    argv = ["--near=job:9@leaf", "--apart", "name:x", "hostname"]
    call = parse_command(argv)
    assert call.allocation_only == ("--near", "--apart")
    out = allocation_argv(parse_options(argv, OPTIONS, stop_at_positional=True), call)
    assert out == ["--near", "job:9@leaf", "--apart", "name:x", "--job-name=hostname"]


def test_scontrol_and_hal_show_print_the_rules() -> None:
    info = job(5, near=["job:3@leaf", "preferred=name:db@node"], apart=["job:4@node"])
    record = job_record(info, 0.0)
    assert "Near=job:3@leaf,preferred=name:db@node" in record
    assert "Apart=job:4@node" in record
    assert any("Near=job:3@leaf,preferred=name:db@node Apart=job:4@node" in line for line in
               job_lines(info, 0.0))  # fmt: skip
    assert not any("Near=" in line for line in job_record(job(6), 0.0))
