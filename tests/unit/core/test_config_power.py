"""``[power]`` in hal.toml: Slurm's defaults, and refusals that name the key and say
what to write (the programs' files are checked as the server starts or reconfigures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.config.model import config_from_dict
from hal.config.power import PowerConfig, check_programs
from hal.core.errors import InvalidRequest

PROGS = {"suspend_program": "/usr/sbin/off", "resume_program": "/usr/sbin/on"}


def test_off_without_the_table_and_slurms_defaults_with_it() -> None:
    assert config_from_dict({}).power == PowerConfig()
    assert not PowerConfig().enabled
    power = config_from_dict({"power": dict(PROGS)}).power
    assert power.enabled and not power.automatic  # suspend_time: -1 by default
    assert (power.resume_timeout, power.suspend_timeout) == (60, 30)
    assert (power.resume_rate, power.suspend_rate) == (300, 60)


def test_values() -> None:
    power = config_from_dict(
        {
            "partitions": [{"name": "batch"}, {"name": "interactive"}],
            "power": {
                **PROGS,
                "suspend_time": 600,
                "resume_timeout": 120,
                "suspend_rate": 0,
                "exclude_nodes": "login[1-2],gpu1",
                "exclude_partitions": ["interactive"],
            },
        }
    ).power
    assert power.automatic and power.suspend_time == 600
    assert power.exclude_nodes == ("login1", "login2", "gpu1")
    assert power.exclude_partitions == ("interactive",)
    assert (power.resume_timeout, power.suspend_rate) == (120, 0)
    assert not config_from_dict({"power": {**PROGS, "suspend_time": 0}}).power.automatic


@pytest.mark.parametrize(
    ("table", "field", "hint"),
    [
        ({"resume_program": "/x"}, "power.suspend_program", 'suspend_program = "/'),
        ({**PROGS, "resume_program": "node-on"}, "power.resume_program", "absolute path"),
        ({**PROGS, "suspend_time": -5}, "power.suspend_time", "-1 for never"),
        ({**PROGS, "suspend_time": "10m"}, "power.suspend_time", "suspend_time = 600"),
        ({**PROGS, "resume_timeout": -1}, "power.resume_timeout", "> 0"),
        ({**PROGS, "suspend_timeout": 0}, "power.suspend_timeout", "> 0"),
        ({**PROGS, "resume_rate": -1}, "power.resume_rate", ">= 0"),
        ({**PROGS, "exclude_nodes": "n[1-"}, "power.exclude_nodes", "host list"),
        ({**PROGS, "exclude_partitions": ["nope"]}, "power.exclude_partitions", "debug"),
        ({**PROGS, "suspend_programme": "/x"}, "power.suspend_programme", "suspend_program"),
    ],
)
def test_bad_values_are_refused_with_the_key(
    table: dict[str, object], field: str, hint: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"power": table}, source="hal.toml")
    assert err.value.field == field
    assert err.value.message.startswith(f"hal.toml: {field}: ")
    assert hint in err.value.message


def test_programs_that_are_missing_or_not_executable_are_refused(tmp_path: Path) -> None:
    on, off = tmp_path / "on", tmp_path / "off"
    on.write_text("#!/bin/sh\n")
    off.write_text("#!/bin/sh\n")
    on.chmod(0o755)
    off.chmod(0o644)  # (no x bit: not even root may run it)
    config = config_from_dict(
        {"power": {"suspend_program": str(off), "resume_program": str(on)}}
    ).power
    with pytest.raises(InvalidRequest) as err:
        check_programs(config, "hal.toml")
    assert err.value.field == "power.suspend_program"
    assert f"chmod +x {off}" in err.value.message
    off.chmod(0o755)
    check_programs(config, "hal.toml")  # both fine now
    off.unlink()
    with pytest.raises(InvalidRequest) as gone:
        check_programs(config, "hal.toml")
    assert (gone.value.field, "is no file" in gone.value.message) == ("power.suspend_program", True)
    check_programs(PowerConfig())  # no [power]: nothing to check
