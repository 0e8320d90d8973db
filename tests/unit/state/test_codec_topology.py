"""The stored job spec keeps --switches and --topology (SQLite and PostgreSQL both store
the spec as this JSON), and rows written before these fields existed still load."""

from __future__ import annotations

import json

from hal.core.job import JobSpec, TopologyConstraint
from hal.state.codec import spec_from_json, spec_to_json


def test_topology_fields_round_trip() -> None:
    spec = JobSpec(
        user="alice",
        script="#!/bin/sh\n",
        switches=2,
        switch_wait_s=3600,
        topology=TopologyConstraint("rack", required=True),
    )
    assert spec_from_json(spec_to_json(spec), spec.script) == spec


def test_specs_stored_before_the_fields_existed_load_with_defaults() -> None:
    d = json.loads(spec_to_json(JobSpec(user="bob", script="")))
    for name in ("switches", "switch_wait_s", "topology"):
        d.pop(name)
    spec = spec_from_json(json.dumps(d), "#!/bin/sh\n")
    assert (spec.switches, spec.switch_wait_s, spec.topology) == (0, None, None)
