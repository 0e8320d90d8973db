"""The stored job spec keeps the script's arguments and path (a requeued job, or one
still pending when the server restarts, runs with them), and rows written before these
fields existed load with none."""

from __future__ import annotations

import json

from hal.core.job import JobSpec
from hal.state.codec import spec_from_json, spec_to_json


def test_script_arguments_round_trip() -> None:
    spec = JobSpec(
        user="alice",
        script="#!/bin/sh\n",
        script_args=("two words", "-x", ""),
        script_path="/home/alice/job.sh",
    )
    assert spec_from_json(spec_to_json(spec), spec.script) == spec


def test_specs_stored_before_the_fields_existed_load_without_arguments() -> None:
    d = json.loads(spec_to_json(JobSpec(user="bob", script="", script_args=("a",))))
    d.pop("script_args")
    d.pop("script_path")
    spec = spec_from_json(json.dumps(d), "#!/bin/sh\n")
    assert (spec.script_args, spec.script_path) == ((), None)
