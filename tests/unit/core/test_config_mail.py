"""``[mail]`` in hal.toml: Slurm's MailProg default, and refusals that name the key."""

from __future__ import annotations

import pytest

from hal.config.mail import MailConfig
from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest


def test_defaults_and_values() -> None:
    assert config_from_dict({}).mail == MailConfig(prog="/bin/mail", domain="")
    mail = config_from_dict({"mail": {"prog": "/usr/bin/mail", "domain": "example.org"}}).mail
    assert (mail.prog, mail.domain) == ("/usr/bin/mail", "example.org")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"prog": "mail"}, "mail.prog"),
        ({"domain": "a b"}, "mail.domain"),
        ({"domain": "@x.org"}, "mail.domain"),
        ({"timeout_seconds": 0}, "mail.timeout_seconds"),
        ({"program": "/bin/mail"}, "mail.program"),
    ],
)
def test_bad_values_are_refused(table: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"mail": table})
    assert err.value.field == field
