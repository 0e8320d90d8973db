"""``[mail]`` of ``hal.toml``: the program that sends job mail, as Slurm's MailProg.

Example (slurm.conf's ``MailProg`` / ``MailDomain``, in snake_case)::

    [mail]                         # optional; these are the defaults
    prog = "/bin/mail"             # MailProg: run as `prog -s SUBJECT RECIPIENT`
    domain = ""                    # MailDomain: appended to a user without --mail-user
    timeout_seconds = 60           # HAL's: a program still running then is killed

A program that does not exist drops job mail (logged once); nothing else changes. See
docs/user/mail.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hal.config.priority import fail, positive_seconds, unknown_key

MAIL_KEYS = ("prog", "domain", "timeout_seconds")
SLURM_MAIL_PROG = "/bin/mail"  # Slurm's default MailProg
MAIL_TIMEOUT_S = 60.0  # HAL's: Slurm waits on MailProg without a limit


@dataclass(frozen=True, slots=True)
class MailConfig:
    prog: str = SLURM_MAIL_PROG
    domain: str = ""
    timeout_seconds: float = MAIL_TIMEOUT_S


def mail_from_table(table: Any, source: str) -> MailConfig:
    if not isinstance(table, dict):
        raise fail(source, "mail", "[mail] must be a table")
    for key in table:
        if key not in MAIL_KEYS:
            raise fail(source, f"mail.{key}", unknown_key(key, MAIL_KEYS))
    prog = table.get("prog", SLURM_MAIL_PROG)
    if not isinstance(prog, str) or not prog.startswith("/"):
        raise fail(source, "mail.prog", f'must be an absolute path like "/bin/mail" (got {prog!r})')
    domain = table.get("domain", "")
    if not isinstance(domain, str) or any(c.isspace() or c == "@" for c in domain):
        raise fail(source, "mail.domain", f'must be a domain like "example.org" (got {domain!r})')
    timeout = MAIL_TIMEOUT_S
    if "timeout_seconds" in table:
        timeout = positive_seconds(table["timeout_seconds"], source, "mail.timeout_seconds")
    return MailConfig(prog=prog, domain=domain.strip(), timeout_seconds=timeout)
