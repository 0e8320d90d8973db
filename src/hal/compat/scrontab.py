"""The ``scrontab`` command (Slurm 20.11+): a user's crontab of batch jobs (docs/user/scrontab.md).

    scrontab [-u USER] -l | -e | -r | FILE | -

The file is read here, as Slurm's scrontab reads it: each entry's ``#SCRON`` lines with
sbatch's options parser, its command as the batch script. The server checks the
schedules, stores the file and keeps one job per entry in the queue.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from hal.compat.sbatch import BatchScript, job_from_directives, process_umask
from hal.compat.seam import Console
from hal.core.errors import HalError, InvalidRequest, NotFound
from hal.slurm.crontab import parse_crontab
from hal.wire.submit import JobSubmit

USAGE = """\
Usage: scrontab [-u user] [-e] [-l] [-r] [file]
  -e           edit the crontab in $VISUAL or $EDITOR (checked when saved)
  -l           print the crontab
  -r           remove the crontab (its pending jobs are cancelled)
  -u <user>    the crontab of another user (administrators)
  file         replace the crontab with this file (- reads standard input)"""
# sbatch options that make no sense for a cron entry: refused on #SCRON lines
REFUSED = {
    "array": "--array",
    "wrap": "--wrap",
    "wait": "--wait",
    "test_only": "--test-only",
    "parsable": "--parsable",
}


def build_jobs(
    text: str, *, environ: Mapping[str, str], cwd: str, now: float, hostname: str = ""
) -> list[JobSubmit]:
    """One job per entry of ``text`` (a crontab file); raises ``InvalidRequest`` with
    "line N: reason" for the first bad line. An entry's job runs its command with
    ``/bin/sh`` in the user's home directory (``$HOME``, else ``cwd``), with the
    environment of this command (as sbatch's ``--export=ALL``), and is named after the
    command's first word unless ``-J`` says otherwise."""
    home = environ.get("HOME") or cwd
    umask = process_umask()
    jobs = []
    for entry in parse_crontab(text):
        script = BatchScript(f"#!/bin/sh\n{entry.command}\n", _name(entry.command))
        jobs.append(
            job_from_directives(
                entry.options,
                script,
                environ=environ,
                cwd=home,
                now=now,
                hostname=hostname,
                umask=umask,
                refused=REFUSED,
                line=entry.line,
            )
        )
    return jobs


def _name(command: str) -> str:
    try:
        first = shlex.split(command)[0]
    except (ValueError, IndexError):
        first = command.split(maxsplit=1)[0]
    return os.path.basename(first) or first


def scrontab(argv: list[str], console: Console) -> int:
    try:
        action, user, source = _arguments(argv)
    except InvalidRequest as err:
        console.err(f"scrontab: {err.message}")
        console.err(USAGE)
        return 1
    if action == "help":
        console.out(USAGE)
        return 0
    try:
        who = user or console.current_user()
        if action == "list":
            console.stdout.write(console.client.crontab(who).text)
            return 0
        if action == "remove":
            console.client.delete_crontab(who)
            return 0
        if action == "edit":
            return _edit(who, console)
        text = console.stdin.read() if source == "-" else _read(source, console.cwd)
        return _install(who, text, console)
    except HalError as err:
        return console.error(err.message)


def _arguments(argv: list[str]) -> tuple[str, str, str]:
    """(action, user, file): action is list, remove, edit, file or help."""
    action, user, source = "", "", ""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--usage"):
            return "help", "", ""
        if word == "-u":
            user = next(words, "")
            if not user:
                raise InvalidRequest("option -u needs a user name")
            continue
        if word.startswith("-u") and len(word) > 2:
            user = word[2:]
            continue
        wanted = {"-l": "list", "-e": "edit", "-r": "remove"}.get(word)
        if wanted is None and word.startswith("-") and word != "-":
            raise InvalidRequest(f"invalid option -- '{word.lstrip('-')}'")
        if action:
            raise InvalidRequest("give one of -e, -l, -r or a file")
        action, source = (wanted, "") if wanted else ("file", word)
    if not action:
        raise InvalidRequest("give one of -e, -l, -r or a file (- for standard input)")
    return action, user, source


def _read(path: str, cwd: str) -> str:
    try:
        return Path(cwd, path).read_text()
    except OSError as err:
        raise InvalidRequest(f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise InvalidRequest(f"cannot read {path}: it is not UTF-8 text") from None


def _install(user: str, text: str, console: Console) -> int:
    """Check and send ``text``; a bad line is reported and nothing changes."""
    jobs = build_jobs(
        text,
        environ=console.environ,
        cwd=console.cwd,
        now=console.clock(),
        hostname=socket.gethostname(),
    )
    console.client.put_crontab(user, text, jobs)
    return 0


def _edit(user: str, console: Console) -> int:
    """``-e``: the crontab in the user's editor; saved only once it is valid. A refused
    edit can be edited again (asked when standard input is a terminal); otherwise the
    old crontab stays."""
    try:
        before = console.client.crontab(user).text
    except NotFound:
        before = ""
    editor = console.environ.get("VISUAL") or console.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="scrontab.") as folder:
        path = Path(folder, "crontab")
        path.write_text(before)
        while True:
            done = subprocess.run(  # the editor's words as the user wrote them
                ["/bin/sh", "-c", f'{editor} "$1"', "scrontab", str(path)], check=False
            )
            if done.returncode != 0:
                return console.error(
                    f"{editor} exited with status {done.returncode}; crontab unchanged"
                )
            text = path.read_text()
            if text == before:
                console.err("scrontab: no changes made to crontab")
                return 0
            try:
                return _install(user, text, console)
            except InvalidRequest as err:
                console.error(err.message)
            if not _retry(console):
                console.err("scrontab: the crontab was not changed")
                return 1


def _retry(console: Console) -> bool:
    if not console.stdin.isatty():
        return False
    console.stderr.write("Do you want to retry the edit? (y/n) ")
    console.stderr.flush()
    return console.stdin.readline().strip().lower().startswith("y")
