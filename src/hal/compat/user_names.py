"""The user names ``squeue -u`` and ``scancel -u`` take.

Slurm's commands turn each name into a uid with the host's account database
(``uid_from_string``: a name, or a number that is some account's uid) and report one it
does not know: squeue says ``Invalid user: NAME`` and goes on, scancel says ``Invalid user
name: NAME`` and exits 1. HAL's jobs carry user names that the agents' hosts run them as
and its tokens name, which the host running the command may not have as accounts, so a
name the server holds jobs of (pending, running, or ended within MinJobAge) counts as
known too.
"""

from __future__ import annotations

import pwd

from hal.compat.seam import Client


def resolve_user(client: Client, text: str) -> str | None:
    """The user name ``text`` means (a uid becomes its account's name), or None when
    neither this host nor the server knows it."""
    if text.isdigit():
        try:
            return pwd.getpwuid(int(text)).pw_name
        except KeyError:
            return None
    try:
        pwd.getpwnam(text)
    except KeyError:
        # asked only for names this host lacks: one request, of the jobs squeue and
        # scancel act on (not the user's whole history, which may be a million jobs)
        if not client.jobs(users=[text], include_finished=True, validate=False):
            return None
    return text
