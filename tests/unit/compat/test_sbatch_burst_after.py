"""``--burst-after`` (sbatch, ``#SBATCH``, salloc and srun's own allocation): parsed,
refused when malformed before anything is sent, stored with the job."""

from __future__ import annotations

import pytest

from hal.api.convert import to_spec
from hal.compat.options import parse_options
from hal.compat.sbatch import parse_sbatch
from hal.compat.srun import OPTIONS, parse_command
from hal.compat.srun_alloc import allocation_argv
from hal.core.errors import InvalidRequest
from hal.state.codec import spec_from_json, spec_to_json
from hal.wire.submit import JobSubmit, non_defaults


def _parse(*argv: str, script: str = "#!/bin/bash\necho hi\n") -> dict[str, object]:
    request = parse_sbatch(list(argv), environ={}, cwd="/work", read_stdin=lambda: script, now=0.0)
    return non_defaults(request.job)


def test_option_and_directive() -> None:
    assert _parse("--burst-after=10m")["burst_after"] == "600s"
    assert _parse("--burst-after", "0.5x")["burst_after"] == "0.5x"
    assert "burst_after" not in _parse()
    script = "#!/bin/bash\n#SBATCH --burst-after=never\necho hi\n"
    assert _parse(script=script)["burst_after"] == "never"
    assert _parse("--burst-after=1h+1x", script=script)["burst_after"] == "3600s+1x"


def test_a_bad_value_is_refused_before_sending() -> None:
    with pytest.raises(InvalidRequest, match="--burst-after takes a duration"):
        _parse("--burst-after=whenever")


def test_it_reaches_the_spec_and_survives_the_store() -> None:
    request = parse_sbatch(
        ["--burst-after=2h"], environ={}, cwd="/", read_stdin=lambda: "#!/bin/sh\n", now=0.0
    )
    spec = to_spec(request.job, "alice", max_array_size=10)
    assert spec.burst_after == "7200s"
    assert spec_from_json(spec_to_json(spec), spec.script).burst_after == "7200s"
    # the REST submission is checked by the server too
    bad = JobSubmit(script="#!/bin/sh\n", burst_after="later")
    with pytest.raises(InvalidRequest, match="--burst-after takes") as err:
        to_spec(bad, "alice", max_array_size=10)
    assert err.value.field == "burst_after"


def test_srun_passes_it_to_its_allocation() -> None:
    argv = ["--burst-after=30m", "hostname"]
    parsed = parse_options(argv, OPTIONS, stop_at_positional=True)
    assert "--burst-after" in allocation_argv(parsed, parse_command(argv))
