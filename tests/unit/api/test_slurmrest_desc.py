"""``job_desc_msg`` → HAL's submission (``hal.api.slurmrest.desc``): units (minutes, MiB),
no_val structs, the two environment shapes, GPUs, and refusals named by field."""

from __future__ import annotations

from hal.api.slurmrest.desc import read_submit, read_update


def test_units_no_val_and_gpus_are_mapped() -> None:
    req, parsed = read_submit(
        {
            "script": "#!/bin/sh\ntrue\n",
            "job": {
                "nodes": "2-4",
                "time_limit": {"set": True, "infinite": False, "number": 90},
                "memory_per_cpu": 512,
                "tres_per_node": "gres/gpu:a100:2",
                "environment": ["A=1", "B=x=y"],
                "begin_time": {"set": True, "number": 1_900_000_000},
                "deadline": 1_900_086_400,
                "excluded_nodes": ["n[1-2]"],
                "time_minimum": {"set": False, "infinite": False, "number": 0},
            },
        }
    )
    assert parsed.errors == [] and req is not None
    assert (req.nodes_min, req.nodes_max) == (2, 4)
    assert req.time_limit_seconds == 5400
    assert req.memory_per_cpu_bytes == 512 * 1024 * 1024
    assert (req.gpus_per_node, req.gpu_type) == (2, "a100")
    assert req.environment == {"A": "1", "B": "x=y"}
    assert req.begin_time == 1_900_000_000.0
    assert req.deadline == 1_900_086_400.0
    assert req.exclude == ["n1", "n2"]
    assert req.time_min_seconds is None


def test_infinite_time_is_no_limit_and_a_dict_environment_is_read() -> None:
    req, _ = read_submit(
        {"script": "x", "job": {"time_limit": {"infinite": True}, "environment": {"K": "v"}}}
    )
    assert req is not None and req.time_limit_seconds == 0 and req.environment == {"K": "v"}


def test_refusals_name_their_fields() -> None:
    req, parsed = read_submit(
        {"job": {"x11": ["BATCH"], "tasks": "many", "environment": ["NOEQUALS"]}}
    )
    assert req is None
    assert sorted(e["source"] for e in parsed.errors) == [
        "job.environment",
        "job.tasks",
        "job.x11",
        "script",
    ]


def test_update_takes_only_what_scontrol_update_changes() -> None:
    parsed = read_update({"job_id": 5, "priority": {"set": True, "number": 7}, "tasks": 2})
    assert parsed.fields == {"priority": 7}
    assert [e["source"] for e in parsed.errors] == ["job.tasks"]


def test_mail_flags_become_sbatchs_words() -> None:
    """slurmrestd's mail_type flags (``TIME=80%``, ``INVALID_DEPENDENCY``) are sbatch's
    ``--mail-type`` words; an unknown flag is refused by name, not ignored."""
    req, parsed = read_submit(
        {
            "script": "x",
            "job": {"mail_type": ["BEGIN", "TIME=80%", "INVALID_DEPENDENCY"], "mail_user": "a@b"},
        }
    )
    assert parsed.errors == [] and parsed.warnings == [] and req is not None
    assert (req.mail_type, req.mail_user) == ("BEGIN,TIME_LIMIT_80,INVALID_DEPEND", "a@b")
    req, parsed = read_submit({"script": "x", "job": {"mail_type": ["SOMETIMES"]}})
    assert req is None and "job.mail_type" in str(parsed.errors), parsed.errors


def test_the_wire_bounds_of_hals_api_apply() -> None:
    """``tasks: 0``, a nice beyond ±10000 and a 300-character name were submitted by the
    facade (it built ``JobSubmit`` without pydantic) though ``POST /v1/jobs`` refuses
    them: each is now a 9001 entry naming the job_desc_msg field, and nothing is built."""
    for job, source, words in [
        ({"tasks": 0}, "job.tasks", "greater than or equal to 1"),
        ({"nice": 100_000}, "job.nice", "less than or equal to 10000"),
        ({"nice": {"set": True, "number": -20_000}}, "job.nice", "greater than or equal to"),
        ({"name": "n" * 300}, "job.name", "at most 256 characters"),
        ({"current_working_directory": "/" + "d" * 5000}, "job.current_working_directory", ""),
        ({"nodes": 0}, "job.nodes", "greater than or equal to 1"),
    ]:
        req, parsed = read_submit({"script": "#!/bin/sh\ntrue\n", "job": job})
        assert req is None, job
        (entry,) = parsed.errors
        assert entry["source"] == source, entry
        assert entry["error_number"] == 9001, entry
        assert str(entry["description"]).startswith(f"{source}: "), entry
        assert words in str(entry["description"]), entry
