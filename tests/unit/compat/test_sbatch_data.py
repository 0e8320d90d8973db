"""``--data key[,key]`` and ``#HAL`` directive lines: parsed, validated, stored, shown."""

from __future__ import annotations

import pytest

from hal.api.convert import to_spec
from hal.compat.sbatch import parse_sbatch
from hal.core.errors import InvalidRequest
from hal.state.codec import spec_from_json, spec_to_json
from hal.wire.submit import non_defaults


def _parse(*argv: str, script: str = "#!/bin/bash\necho hi\n") -> dict[str, object]:
    request = parse_sbatch(list(argv), environ={}, cwd="/work", read_stdin=lambda: script, now=0.0)
    return non_defaults(request.job)


def test_data_option_and_hal_directive() -> None:
    assert _parse("--data=ds:a,ds:b")["data"] == ["ds:a", "ds:b"]
    assert "data" not in _parse()
    script = "#!/bin/bash\n#SBATCH -n 2\n#HAL --data=ds:x\necho hi\n"
    fields = _parse(script=script)
    assert fields["data"] == ["ds:x"] and fields["ntasks"] == 2
    # the command line wins over the script, as for every option
    assert _parse("--data", "ds:y", script=script)["data"] == ["ds:y"]


def test_repeated_data_options_add_up() -> None:
    """A job's inputs are a list: a second --data (or #HAL line) adds keys instead of
    silently dropping the first, which placement would then ignore."""
    assert _parse("--data=ds:a", "--data", "ds:b")["data"] == ["ds:a", "ds:b"]
    script = "#!/bin/bash\n#HAL --data=ds:x\n#HAL --data=ds:y,ds:x\necho hi\n"
    assert _parse(script=script)["data"] == ["ds:x", "ds:y"]
    assert _parse("--data=ds:z", script=script)["data"] == ["ds:z"]  # the command line wins


def test_a_bad_key_is_refused_before_sending() -> None:
    with pytest.raises(InvalidRequest, match="empty key"):
        _parse("--data=a,,b")


def test_data_reaches_the_spec_and_survives_the_store() -> None:
    request = parse_sbatch(
        ["--data=k1,k2"], environ={}, cwd="/", read_stdin=lambda: "#!/bin/sh\n", now=0.0
    )
    spec = to_spec(request.job, "alice", max_array_size=10)
    assert spec.data == ("k1", "k2")
    assert spec_from_json(spec_to_json(spec), spec.script).data == ("k1", "k2")
