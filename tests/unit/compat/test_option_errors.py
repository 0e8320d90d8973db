"""Command-line slips in the query commands: "does not support it" only for an option the
command does not know, getopt's own words for a known one used wrongly (as sbatch)."""

from __future__ import annotations

import pytest
from compat_fakes import FakeClient, call

from hal.compat.options import OptionError

# (command, an option that needs a value, a flag that takes none)
COMMANDS = [
    ("sacct", "--format", "--noheader"),
    ("sprio", "--user", "--noheader"),
    ("scancel", "--user", "--me"),
    ("sinfo", "--partition", "--noheader"),
    ("squeue", "--user", "--noheader"),
    ("sshare", "--users", "--noheader"),
]


@pytest.mark.parametrize(("command", "option", "flag"), COMMANDS)
def test_missing_value_is_not_called_unsupported(command: str, option: str, flag: str) -> None:
    result = call(FakeClient(), command, option)
    assert result.rc == 1
    assert result.err == f"{command}: error: option '{option}' requires an argument\n"


@pytest.mark.parametrize(("command", "option", "flag"), COMMANDS)
def test_value_on_a_flag_is_not_called_unsupported(command: str, option: str, flag: str) -> None:
    result = call(FakeClient(), command, f"{flag}=x")
    assert result.rc == 1
    assert result.err == f"{command}: error: option '{flag}' doesn't allow an argument\n"


@pytest.mark.parametrize(("command", "option", "flag"), COMMANDS)
def test_unknown_option_is_called_unsupported(command: str, option: str, flag: str) -> None:
    result = call(FakeClient(), command, "--no-such-option")
    assert result.rc == 1
    assert result.err == (
        f"{command}: error: unrecognized option '--no-such-option': "
        f"HAL's {command} does not support it\n"
    )


def test_for_command_adds_the_hint_only_when_unknown() -> None:
    missing = OptionError("option '--user' requires an argument", "--user")
    unknown = OptionError("invalid option -- 'Z'", "-Z", unknown=True)
    assert missing.for_command("squeue") == "option '--user' requires an argument"
    assert (
        unknown.for_command("squeue") == "invalid option -- 'Z': HAL's squeue does not support it"
    )
