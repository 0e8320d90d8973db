"""Job mail as Slurm's slurmctld sends it: ``--mail-type`` flags, the subject line and the
environment its MailProg gets.

Pure: ``hal.server.job_mail`` decides when a mail is due and ``hal.server.mail_program``
runs the program. The words are
Slurm's (``slurmctld/agent.c``: ``_mail_type_str``, ``_set_job_time``,
``_set_job_term_info``, ``mail_job_info``; ``print_mail_type`` and ``parse_mail_type``
in the common code), written from memory of Slurm 21.08-23.02 (docs/user/mail.md says which
parts could not be checked against a running Slurm).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntFlag

from hal.core.errors import InvalidRequest
from hal.slurm.syntax import duration_long


class MailType(IntFlag):
    """Slurm's ``MAIL_*`` bits (the values are HAL's; only the names travel)."""

    NONE = 0
    BEGIN = 1 << 0
    END = 1 << 1
    FAIL = 1 << 2
    REQUEUE = 1 << 3
    TIME_LIMIT = 1 << 4  # MAIL_JOB_TIME100
    TIME_LIMIT_90 = 1 << 5
    TIME_LIMIT_80 = 1 << 6
    TIME_LIMIT_50 = 1 << 7
    STAGE_OUT = 1 << 8  # accepted; HAL has no burst buffers, so it is never sent
    ARRAY_TASKS = 1 << 9
    INVALID_DEPEND = 1 << 10


# what ALL means to Slurm: not the time-limit warnings, not ARRAY_TASKS
ALL = (
    MailType.INVALID_DEPEND
    | MailType.BEGIN
    | MailType.END
    | MailType.FAIL
    | MailType.REQUEUE
    | MailType.STAGE_OUT
)
# print_mail_type's order (``scontrol show job``'s MailType=)
_SHOWN_ORDER = (
    MailType.INVALID_DEPEND,
    MailType.BEGIN,
    MailType.END,
    MailType.FAIL,
    MailType.REQUEUE,
    MailType.STAGE_OUT,
    MailType.TIME_LIMIT_50,
    MailType.TIME_LIMIT_80,
    MailType.TIME_LIMIT_90,
    MailType.TIME_LIMIT,
    MailType.ARRAY_TASKS,
)
# the time-limit warnings by the share of the limit that sends them
TIME_SHARES: tuple[tuple[MailType, float], ...] = (
    (MailType.TIME_LIMIT_50, 0.5),
    (MailType.TIME_LIMIT_80, 0.8),
    (MailType.TIME_LIMIT_90, 0.9),
    (MailType.TIME_LIMIT, 1.0),
)
TIME_WARNINGS = (
    MailType.TIME_LIMIT_50 | MailType.TIME_LIMIT_80 | MailType.TIME_LIMIT_90 | MailType.TIME_LIMIT
)
# _mail_type_str: the word in the subject (and SLURM_JOB_MAIL_TYPE)
EVENT_WORDS: dict[MailType, str] = {
    MailType.BEGIN: "Began",
    MailType.END: "Ended",
    MailType.FAIL: "Failed",
    MailType.REQUEUE: "Requeued",
    MailType.STAGE_OUT: "StageOut/Teardown",
    MailType.TIME_LIMIT: "Reached time limit",
    MailType.TIME_LIMIT_90: "Reached 90% of time limit",
    MailType.TIME_LIMIT_80: "Reached 80% of time limit",
    MailType.TIME_LIMIT_50: "Reached 50% of time limit",
    MailType.INVALID_DEPEND: "Invalid dependency",
}


def parse_mail_type(text: str) -> int:
    """``--mail-type``'s comma list (any case) → flags; ``NONE`` anywhere means none, as in
    Slurm's parse_mail_type. An unknown word or an empty list is refused with sbatch's
    message (``--mail-type=X invalid``)."""
    flags = MailType.NONE
    words = [w.strip() for w in text.split(",")]
    for word in words:
        upper = word.upper()
        if upper == "NONE":
            return 0
        if upper == "ALL":
            flags |= ALL
        elif upper in MailType.__members__ and upper != "NONE":
            flags |= MailType[upper]
        else:
            flags = MailType.NONE
            break
    if not flags:
        raise InvalidRequest(f"--mail-type={text} invalid", field="mail-type")
    return int(flags)


@functools.lru_cache(maxsize=1024)  # (few distinct values; every job listed asks: Flag's & is slow)
def mail_type_names(flags: int) -> str:
    """``BEGIN,END``, ``NONE``: print_mail_type's words, in its order."""
    names = [str(flag.name) for flag in _SHOWN_ORDER if flags & flag]
    return ",".join(names) or "NONE"


def check_mail_user(text: str) -> str:
    """``--mail-user`` as given, refused when the mail program could take it for anything
    but an address: empty, starting with ``-`` (``[mail] prog`` gets it as an argument
    after ``-s SUBJECT``, so ``-Ssendmail=...`` would be one of its options), or holding
    whitespace or control characters. Not all ``mail`` programs take ``--`` before the
    recipient (s-nail reads what follows it as options for its MTA), so this is the guard."""
    if not text:
        reason = "give an address"
    elif text.startswith("-"):
        reason = "an address may not start with '-'"
    elif any(ch.isspace() or not ch.isprintable() for ch in text):
        reason = "an address may not hold spaces or control characters"
    else:
        return text
    raise InvalidRequest(f"--mail-user={text!r} invalid: {reason}", field="mail-user")


def mail_recipient(user: str, mail_user: str | None, domain: str) -> str:
    """``--mail-user``, else the submitting user, with MailDomain appended when the
    cluster has one (slurmctld resolves this at submission and keeps it)."""
    if mail_user:
        return mail_user
    return f"{user}@{domain}" if domain else user


@dataclass(frozen=True, slots=True)
class MailFacts:
    """What one mail says of a job (or, for an array's summary, of the array).

    ``task_id``: an array element's index, shown as ``Array Task``; ``summary``: the
    whole array (``Array Summary``, ``job_id`` being the array job id). ``exit_codes``:
    the lowest and highest exit codes (one job: both its own); ``max_signal``: the
    highest signal that ended one (0: none)."""

    job_id: int
    name: str
    user: str
    state: str
    queued_s: float | None = None  # submit → start; None: never started
    run_s: float | None = None  # start → end (or now); None: never started
    exit_codes: tuple[int, int] = (0, 0)
    max_signal: int = 0
    array_job_id: int | None = None
    task_id: int | None = None
    summary: bool = False
    task_count: int = 0  # a summary's elements


def subject(event: MailType, facts: MailFacts) -> str:
    """The subject Slurm writes (``mail_job_info``), e.g. ``Slurm Job_id=12 Name=foo
    Ended, Run time 00:01:02, COMPLETED, ExitCode 0``."""
    if facts.summary:
        head = f"Slurm Array Summary Job_id={facts.array_job_id}_* ({facts.job_id})"
    elif facts.task_id is not None:
        head = f"Slurm Array Task Job_id={facts.array_job_id}_{facts.task_id} ({facts.job_id})"
    else:
        head = f"Slurm Job_id={facts.job_id}"
    return f"{head} Name={facts.name} {EVENT_WORDS[event]}{_times(event, facts)}" + _ending(
        event, facts
    )


def _times(event: MailType, facts: MailFacts) -> str:
    """_set_job_time: the queued time of a start, the run time of an end or a warning."""
    if event is MailType.BEGIN and facts.queued_s is not None:
        return f", Queued time {duration_long(facts.queued_s)}"
    shown = MailType.END | MailType.FAIL | MailType.REQUEUE | TIME_WARNINGS
    if event & shown and facts.run_s is not None:
        return f", Run time {duration_long(facts.run_s)}"
    return ""


def _ending(event: MailType, facts: MailFacts) -> str:
    """_set_job_term_info: how an end ended (state and exit code; an array's range)."""
    if event not in (MailType.END, MailType.FAIL):
        return ""
    low, high = facts.exit_codes
    if not facts.summary:
        return f", {facts.state}, ExitCode {high}"
    state = "Mixed" if low == 0 and (high > 0 or facts.max_signal) else facts.state
    if facts.max_signal:
        return f", {state}, MaxSignal [{facts.max_signal}]"
    return f", {state}, ExitCode [{low}-{high}]"


def mail_environment(event: MailType, facts: MailFacts, cluster_name: str) -> dict[str, str]:
    """The variables Slurm 21.08+ gives MailProg (_build_mail_env)."""
    env = {
        "SLURM_JOB_ID": str(facts.job_id),
        "SLURM_JOB_USER": facts.user,
        "SLURM_JOB_MAIL_TYPE": EVENT_WORDS[event],
        "SLURM_JOB_NAME": facts.name,
        "SLURM_JOB_STATE": facts.state,
        "SLURM_JOB_EXIT_CODE_MAX": str(facts.exit_codes[1]),
        "SLURM_JOB_QUEUED_TIME": duration_long(facts.queued_s or 0),
        "SLURM_JOB_RUN_TIME": duration_long(facts.run_s or 0),
        "SLURM_CLUSTER_NAME": cluster_name,
    }
    if facts.array_job_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(facts.array_job_id)
    if facts.summary:
        env["SLURM_JOB_EXIT_CODE_MIN"] = str(facts.exit_codes[0])
        env["SLURM_ARRAY_TASK_COUNT"] = str(facts.task_count)
    elif facts.task_id is not None:
        env["SLURM_ARRAY_TASK_ID"] = str(facts.task_id)
    return env
