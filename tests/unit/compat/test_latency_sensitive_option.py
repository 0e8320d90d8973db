"""``--latency-sensitive`` (sbatch, salloc, srun's own allocation, ``#HAL`` lines) and a
``[[qos]]`` marked ``latency_sensitive``: the job asks to be kept from noisy neighbours
first, and carries ``extra[LATENCY_SENSITIVE] = "1"`` for the interference model."""

from __future__ import annotations

import pytest

from hal.api.convert import to_spec
from hal.compat.options import parse_options
from hal.compat.salloc_options import parse_salloc
from hal.compat.sbatch import parse_sbatch
from hal.compat.srun import OPTIONS as SRUN_OPTIONS
from hal.compat.srun import parse_command
from hal.compat.srun_alloc import allocation_argv
from hal.config.model import config_from_dict
from hal.core.clock import VirtualClock
from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.core.profiles import LATENCY_SENSITIVE
from hal.state.admission import Admission
from hal.state.cluster import new_jobs
from hal.state.codec import spec_from_json, spec_to_json
from hal.state.mirror import Mirror
from hal.wire.submit import JobSubmit


def sbatch(*argv: str, script: str = "#!/bin/sh\ntrue\n") -> JobSubmit:
    return parse_sbatch(list(argv), environ={}, cwd="/w", read_stdin=lambda: script, now=0.0).job


def test_sbatch_takes_the_flag_on_the_command_line_and_in_a_hal_line() -> None:
    assert sbatch("--latency-sensitive").latency_sensitive
    assert not sbatch().latency_sensitive
    assert sbatch(script="#!/bin/sh\n#HAL --latency-sensitive\ntrue\n").latency_sensitive
    assert sbatch(script="#!/bin/sh\n#SBATCH --latency-sensitive\ntrue\n").latency_sensitive


def test_the_flag_takes_no_value() -> None:
    with pytest.raises(InvalidRequest, match="latency-sensitive"):
        sbatch("--latency-sensitive=yes")


def test_salloc_and_srun_allocations_take_it() -> None:
    assert parse_salloc(
        ["--latency-sensitive", "true"], environ={}, cwd="/w", now=0.0
    ).job.latency_sensitive
    argv = ["--latency-sensitive", "true"]
    parsed = parse_options(argv, SRUN_OPTIONS, stop_at_positional=True)
    assert "--latency-sensitive" in allocation_argv(parsed, parse_command(argv, {}), {})


def test_the_job_carries_the_mark_and_keeps_it_in_the_store() -> None:
    spec = to_spec(sbatch("--latency-sensitive"), "alice", max_array_size=10)
    assert spec.latency_sensitive
    assert spec_from_json(spec_to_json(spec), spec.script).latency_sensitive
    (job,), _, _ = new_jobs([spec], [("batch", 60, 1)], 7, 0.0)
    assert job.extra[LATENCY_SENSITIVE] == "1"
    (plain,), _, _ = new_jobs(
        [to_spec(sbatch(), "alice", max_array_size=10)], [("batch", 60, 1)], 8, 0.0
    )
    assert LATENCY_SENSITIVE not in plain.extra


def test_a_qos_can_mark_its_jobs_and_a_bad_value_is_named() -> None:
    config = config_from_dict(
        {"qos": [{"name": "serve", "latency_sensitive": True}, {"name": "batch"}]}
    )
    marked = {q.name: q.latency_sensitive for q in config.priority.qos}
    assert marked == {"serve": True, "batch": False}
    with pytest.raises(InvalidRequest, match=r"qos\[0\].latency_sensitive.*true or false"):
        config_from_dict({"qos": [{"name": "serve", "latency_sensitive": "yes"}]})


def test_a_job_of_a_marked_qos_is_latency_sensitive_when_admitted() -> None:
    config = config_from_dict(
        {"qos": [{"name": "serve", "latency_sensitive": True}, {"name": "batch"}]}
    )
    admission = Admission(Mirror(config, VirtualClock(0.0)))
    served = admission.with_defaults(JobSpec(user="alice", script="", qos="serve"))
    assert served.latency_sensitive
    assert not admission.with_defaults(
        JobSpec(user="alice", script="", qos="batch")
    ).latency_sensitive
