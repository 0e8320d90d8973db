"""A job's artifact pins keep the alias it named (``NAME@stable``) beside the version and
digest in its stored spec; pins stored before aliases (four fields) load without one."""

from __future__ import annotations

import json

from hal.core.artifacts import ARCHIVE, PROGRAM, ArtifactRef
from hal.core.job import JobSpec
from hal.state.codec import spec_from_json, spec_to_json

SHA = "ab" * 32


def test_pins_with_and_without_an_alias_round_trip() -> None:
    pins = (ArtifactRef("app", "2", SHA, PROGRAM, "stable"), ArtifactRef("lib", "1", SHA, ARCHIVE))
    spec = JobSpec(user="alice", script="#!/bin/sh\n", artifacts=pins)
    text = spec_to_json(spec)
    assert json.loads(text)["artifacts"] == [
        ["app", "2", SHA, PROGRAM, "stable"],
        ["lib", "1", SHA, ARCHIVE],  # (no alias: as stored before aliases)
    ]
    assert spec_from_json(text, spec.script).artifacts == pins


def test_pins_stored_before_aliases_load_without_one() -> None:
    d = json.loads(spec_to_json(JobSpec(user="bob", script="")))
    d["artifacts"] = [["app", "1", SHA, PROGRAM]]
    (pin,) = spec_from_json(json.dumps(d), "#!/bin/sh\n").artifacts
    assert (pin.version, pin.alias) == ("1", "")
