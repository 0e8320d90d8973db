"""``--artifact NAME[@VERSION][,...]`` in sbatch: parsed and checked before sending,
repeated options adding up, and the pinned refs kept by the store."""

from __future__ import annotations

import pytest

from hal.api.convert import to_spec
from hal.compat.sbatch import parse_sbatch
from hal.core.artifacts import ArtifactRef
from hal.core.errors import InvalidRequest
from hal.state.codec import spec_from_json, spec_to_json
from hal.wire.submit import non_defaults


def _parse(*argv: str, script: str = "#!/bin/bash\necho hi\n") -> dict[str, object]:
    request = parse_sbatch(list(argv), environ={}, cwd="/work", read_stdin=lambda: script, now=0.0)
    return non_defaults(request.job)


def test_options_and_script_lines_add_up_and_the_command_line_wins() -> None:
    assert _parse("--artifact=gromacs@2024.1,tool")["artifacts"] == ["gromacs@2024.1,tool"]
    assert "artifacts" not in _parse()
    script = "#!/bin/bash\n#SBATCH --artifact=a@1\n#HAL --artifact b\necho hi\n"
    assert _parse(script=script)["artifacts"] == ["a@1,b"]
    assert _parse("--artifact=c", "--artifact=d@2", script=script)["artifacts"] == ["c,d@2"]


def test_a_bad_request_is_refused_before_sending() -> None:
    with pytest.raises(InvalidRequest, match="no version after '@'"):
        _parse("--artifact=tool@")
    with pytest.raises(InvalidRequest, match="'tool' is named twice"):
        _parse("--artifact=tool@1,tool@2")


def test_pins_survive_the_store() -> None:
    request = parse_sbatch(
        ["--artifact=a@1,b"], environ={}, cwd="/", read_stdin=lambda: "#!/bin/sh\n", now=0.0
    )
    spec = to_spec(request.job, "alice", max_array_size=10)
    assert spec.artifacts == (ArtifactRef("a", "1", ""), ArtifactRef("b", "latest", ""))
    pinned = spec.with_changes(artifacts=(ArtifactRef("a", "1", "0" * 64),))
    assert spec_from_json(spec_to_json(pinned), pinned.script).artifacts == pinned.artifacts
