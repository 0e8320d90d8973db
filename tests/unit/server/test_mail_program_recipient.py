"""``MailProgram`` runs ``[mail] prog -s SUBJECT RECIPIENT``: a recipient that the program
would read as an option (a job stored before submissions were checked, a user named
``-x``) is never handed to it, and the program is left alone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from hal.config.mail import MailConfig
from hal.server.mail_program import Mail, MailProgram


def _program(tmp_path: Path) -> tuple[MailProgram, Path]:
    log = tmp_path / "argv.log"
    prog = tmp_path / "mailprog"
    prog.write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {log}\necho >> {log}\n')
    prog.chmod(0o755)
    return MailProgram(MailConfig(prog=str(prog)), lambda _: None), log


def test_an_option_like_recipient_never_reaches_the_program(tmp_path: Path) -> None:
    program, log = _program(tmp_path)
    result = asyncio.run(program.send(Mail("-Ssendmail=/tmp/evil", "Slurm Job_id=1", {})))
    assert result == "failed"
    assert not log.exists()


def test_an_address_does(tmp_path: Path) -> None:
    program, log = _program(tmp_path)
    assert asyncio.run(program.send(Mail("bob@x.org", "Slurm Job_id=1", {}))) == "sent"
    assert log.read_text() == "-s|Slurm Job_id=1|bob@x.org|\n"


def test_a_program_still_running_when_the_workers_stop_is_killed(tmp_path: Path) -> None:
    """The server stops while a slow relay runs: the program (in its own session, so no
    signal to the server reaches it) is killed, not left behind."""
    pid_file = tmp_path / "pid"
    prog = tmp_path / "mailprog"
    prog.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    prog.chmod(0o755)
    program = MailProgram(MailConfig(prog=str(prog), timeout_seconds=120), lambda _: None)

    async def scenario() -> int:
        sending = asyncio.create_task(program.send(Mail("bob@x.org", "Slurm Job_id=1", {})))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.02)
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        return int(pid_file.read_text())

    pid = asyncio.run(scenario())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return  # gone (killed and reaped)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the mail program {pid} outlived its cancelled worker")
