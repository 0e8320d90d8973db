"""``MailProgram``: runs ``[mail] prog`` as slurmctld runs MailProg, off every hot path.

    mail posted (listener, O(1)) ─▶ queue (bounded) ─▶ worker ─▶ prog -s SUBJECT RECIPIENT
                                                                 (env, timeout, stdin /dev/null)

Posting never waits: a full queue drops the mail (counted). A missing program drops
mail too, logged once until it is back; a program that fails or outlives
``timeout_seconds`` (killed) is logged and counted. No job state depends on any of it.

The recipient is an argument after the subject with no ``--`` before it: bsd-mailx and
GNU mailutils take ``--`` as the end of options, but s-nail reads what follows ``--`` as
options for its MTA and then finds no recipient. So ``check_mail_user`` (at submission and
again here) is what keeps a recipient from being read as an option.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from hal.config.mail import MailConfig
from hal.core.errors import InvalidRequest
from hal.slurm.mail import check_mail_user

log = logging.getLogger("hal.mail")
QUEUE_LIMIT = 10_000  # mails waiting for the program; past it, new ones are dropped
WORKERS = 2  # programs run at once (a slow relay delays mail, never the server)
STDERR_SHOWN = 500  # bytes of a failing program's stderr in the log


@dataclass(frozen=True, slots=True)
class Mail:
    recipient: str
    subject: str
    environment: dict[str, str]


# results counted by ``on_result``: sent, failed (non-zero exit or could not start),
# timeout, missing (no such program), dropped (queue full)
RESULTS = ("sent", "failed", "timeout", "missing", "dropped")


class MailProgram:
    def __init__(self, config: MailConfig, on_result: Callable[[str], None]) -> None:
        self.config = config
        self.on_result = on_result
        self.queue: asyncio.Queue[Mail] = asyncio.Queue(QUEUE_LIMIT)
        self._missing_logged = False

    def post(self, mail: Mail) -> None:
        """Queue ``mail`` for the program; never waits."""
        log.info("email msg to %s: %s", mail.recipient, mail.subject)  # slurmctld's words
        try:
            self.queue.put_nowait(mail)
        except asyncio.QueueFull:
            log.warning("job mail dropped (%d waiting): %s", QUEUE_LIMIT, mail.subject)
            self.on_result("dropped")

    async def run(self) -> None:
        """The workers, until cancelled."""
        async with asyncio.TaskGroup() as group:
            for i in range(WORKERS):
                group.create_task(self._work(), name=f"hal-mail-{i}")

    async def _work(self) -> None:
        while True:
            mail = await self.queue.get()
            try:
                self.on_result(await self.send(mail))
            except Exception:  # a bug here must not stop the other mails
                log.exception("job mail failed: %s", mail.subject)
                self.on_result("failed")

    async def send(self, mail: Mail) -> str:
        """Run the program for ``mail``; the result (one of ``RESULTS``)."""
        prog = self.config.prog
        if not os.access(prog, os.X_OK):
            if not self._missing_logged:
                log.warning(
                    "[mail] prog %s is not an executable file: job mail is dropped until it "
                    "is (set [mail] prog in hal.toml)",
                    prog,
                )
                self._missing_logged = True
            return "missing"
        self._missing_logged = False
        try:
            check_mail_user(mail.recipient)
        except InvalidRequest as err:
            # submissions are checked; a job stored before they were, or a user whose
            # name starts with '-', must still not hand the program an option
            log.warning("job mail not sent (%s): %s", err.message, mail.subject)
            return "failed"
        # Slurm gives MailProg only its SLURM_* variables; PATH too, so a script finds
        # sendmail and its tools
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **mail.environment}
        try:
            proc = await asyncio.create_subprocess_exec(
                prog, "-s", mail.subject, mail.recipient,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                start_new_session=True,  # a signal to the server is not the program's
            )  # fmt: skip
        except OSError as err:
            log.warning("[mail] prog %s could not start: %s", prog, err)
            return "failed"
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                _, err_out = await proc.communicate()
        except asyncio.CancelledError:
            # the server stops: the program (its own session, so the server's signal
            # never reached it) goes with the worker rather than outliving it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            log.warning(
                "[mail] prog %s ran past %g s and was killed: %s",
                prog, self.config.timeout_seconds, mail.subject,
            )  # fmt: skip
            return "timeout"
        if proc.returncode != 0:
            text = err_out[-STDERR_SHOWN:].decode(errors="replace").strip()
            log.warning(
                "[mail] prog %s exited %s for %s: %s", prog, proc.returncode, mail.subject, text
            )
            return "failed"
        return "sent"
