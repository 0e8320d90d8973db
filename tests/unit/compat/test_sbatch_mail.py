"""sbatch's --mail-type/--mail-user: from the command line or #SBATCH lines (the command
line wins), refused with sbatch's own words when a type is unknown, and documented in
--help (no longer "accepted; HAL sends no mail")."""

from __future__ import annotations

import pytest

from hal.compat.sbatch import HELP, parse_sbatch
from hal.core.errors import InvalidRequest
from hal.wire.submit import JobSubmit

SCRIPT = "#!/bin/sh\n#SBATCH --mail-type=BEGIN,END\n#SBATCH --mail-user=me@x.org\ntrue\n"


def parse(*argv: str, script: str = SCRIPT) -> JobSubmit:
    request = parse_sbatch(list(argv), environ={}, cwd="/work", read_stdin=lambda: script, now=0.0)
    return request.job


def test_directives_and_the_command_line() -> None:
    job = parse()
    assert (job.mail_type, job.mail_user) == ("BEGIN,END", "me@x.org")
    job = parse("--mail-type=fail")
    assert (job.mail_type, job.mail_user) == ("fail", "me@x.org")


@pytest.mark.parametrize("value", ["BOGUS", "END,bogus", ""])
def test_an_unknown_type_is_refused_before_submitting(value: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse(f"--mail-type={value}")
    assert err.value.message == f"--mail-type={value} invalid"


def test_help_describes_mail() -> None:
    assert "HAL sends no mail" not in HELP
    assert "--mail-type=type" in HELP and "TIME_LIMIT" in HELP and "ARRAY_TASKS" in HELP


@pytest.mark.parametrize("value", ["-Ssendmail=/tmp/evil", "", "bob @x.org"])
def test_a_mail_user_that_is_no_address_is_refused_before_submitting(value: str) -> None:
    """An option-like, empty or spaced --mail-user never reaches the server (which refuses
    it too): the mail program would read ``-S...`` as its own option."""
    with pytest.raises(InvalidRequest) as err:
        parse(f"--mail-user={value}")
    assert err.value.message.startswith(f"--mail-user={value!r} invalid: ")
