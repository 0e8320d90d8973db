"""Job mail's words, as Slurm's slurmctld writes them (``hal.slurm.mail``): what users' mail
filters match on, so a changed space or comma breaks them."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.slurm.mail import (
    ALL,
    MailFacts,
    MailType,
    check_mail_user,
    mail_environment,
    mail_recipient,
    mail_type_names,
    parse_mail_type,
    subject,
)
from hal.slurm.syntax import duration_long

JOB = MailFacts(job_id=12, name="foo", user="alice", state="COMPLETED", queued_s=5, run_s=62)


@pytest.mark.parametrize(
    ("event", "facts", "expected"),
    [
        (MailType.BEGIN, JOB, "Slurm Job_id=12 Name=foo Began, Queued time 00:00:05"),
        (
            MailType.END,
            JOB,
            "Slurm Job_id=12 Name=foo Ended, Run time 00:01:02, COMPLETED, ExitCode 0",
        ),
        (
            MailType.FAIL,
            MailFacts(12, "foo", "alice", "FAILED", 5, 62, exit_codes=(3, 3)),
            "Slurm Job_id=12 Name=foo Failed, Run time 00:01:02, FAILED, ExitCode 3",
        ),
        (
            MailType.REQUEUE,
            JOB,
            "Slurm Job_id=12 Name=foo Requeued, Run time 00:01:02",
        ),
        (
            MailType.TIME_LIMIT_80,
            MailFacts(12, "foo", "alice", "RUNNING", 5, 48),
            "Slurm Job_id=12 Name=foo Reached 80% of time limit, Run time 00:00:48",
        ),
        (
            MailType.TIME_LIMIT,
            MailFacts(12, "foo", "alice", "RUNNING", 5, 60),
            "Slurm Job_id=12 Name=foo Reached time limit, Run time 00:01:00",
        ),
        (
            MailType.INVALID_DEPEND,
            MailFacts(12, "foo", "alice", "PENDING"),
            "Slurm Job_id=12 Name=foo Invalid dependency",
        ),
        (  # an end without a start (cancelled while pending): no run time
            MailType.END,
            MailFacts(12, "foo", "alice", "CANCELLED"),
            "Slurm Job_id=12 Name=foo Ended, CANCELLED, ExitCode 0",
        ),
        (  # a day and more: D-HH:MM:SS
            MailType.END,
            MailFacts(12, "foo", "alice", "TIMEOUT", 0, 90_061),
            "Slurm Job_id=12 Name=foo Ended, Run time 1-01:01:01, TIMEOUT, ExitCode 0",
        ),
    ],
)
def test_a_jobs_subject(event: MailType, facts: MailFacts, expected: str) -> None:
    assert subject(event, facts) == expected


def test_an_array_task_and_summary() -> None:
    task = MailFacts(15, "foo", "alice", "COMPLETED", 0, 3, array_job_id=12, task_id=3)
    assert subject(MailType.END, task) == (
        "Slurm Array Task Job_id=12_3 (15) Name=foo Ended, Run time 00:00:03, COMPLETED, ExitCode 0"
    )
    summary = MailFacts(
        12, "foo", "alice", "COMPLETED", 0, 3, array_job_id=12, summary=True, task_count=4
    )
    assert subject(MailType.END, summary) == (
        "Slurm Array Summary Job_id=12_* (12) Name=foo Ended, Run time 00:00:03, COMPLETED, "
        "ExitCode [0-0]"
    )
    assert subject(MailType.BEGIN, summary) == (
        "Slurm Array Summary Job_id=12_* (12) Name=foo Began, Queued time 00:00:00"
    )


def test_a_summary_of_mixed_ends() -> None:
    """Some elements exited 0, some did not: Slurm says Mixed, and the range."""
    mixed = MailFacts(12, "foo", "a", "FAILED", 0, 1, (0, 2), array_job_id=12, summary=True)
    assert subject(MailType.END, mixed).endswith("Ended, Run time 00:00:01, Mixed, ExitCode [0-2]")
    failed = MailFacts(12, "foo", "a", "FAILED", 0, 1, (1, 2), array_job_id=12, summary=True)
    assert subject(MailType.FAIL, failed).endswith(", FAILED, ExitCode [1-2]")
    killed = MailFacts(12, "foo", "a", "CANCELLED", 0, 1, (0, 0), 9, array_job_id=12, summary=True)
    assert subject(MailType.END, killed).endswith(", Mixed, MaxSignal [9]")


def test_mail_type_words() -> None:
    assert parse_mail_type("begin,END") == MailType.BEGIN | MailType.END
    assert parse_mail_type("NONE") == 0
    assert parse_mail_type("BEGIN,NONE") == 0  # NONE anywhere: none, as Slurm
    assert parse_mail_type("ALL") == ALL
    assert mail_type_names(ALL) == "INVALID_DEPEND,BEGIN,END,FAIL,REQUEUE,STAGE_OUT"
    assert mail_type_names(parse_mail_type("TIME_LIMIT,TIME_LIMIT_80,ARRAY_TASKS,END")) == (
        "END,TIME_LIMIT_80,TIME_LIMIT,ARRAY_TASKS"
    )
    assert mail_type_names(0) == "NONE"


@pytest.mark.parametrize("text", ["BEGN", "", "BEGIN,", "begin,bogus"])
def test_an_unknown_mail_type_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_mail_type(text)
    assert err.value.message == f"--mail-type={text} invalid"


def test_recipient_and_durations() -> None:
    assert mail_recipient("alice", None, "") == "alice"
    assert mail_recipient("alice", "", "example.org") == "alice@example.org"
    assert mail_recipient("alice", "bob@x.org", "example.org") == "bob@x.org"
    assert duration_long(0) == "00:00:00"
    assert duration_long(3599.9) == "00:59:59"
    assert duration_long(86_400) == "1-00:00:00"


def test_mail_program_environment() -> None:
    env = mail_environment(MailType.END, JOB, "hal")
    assert env == {
        "SLURM_JOB_ID": "12",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_MAIL_TYPE": "Ended",
        "SLURM_JOB_NAME": "foo",
        "SLURM_JOB_STATE": "COMPLETED",
        "SLURM_JOB_EXIT_CODE_MAX": "0",
        "SLURM_JOB_QUEUED_TIME": "00:00:05",
        "SLURM_JOB_RUN_TIME": "00:01:02",
        "SLURM_CLUSTER_NAME": "hal",
    }
    task = MailFacts(15, "foo", "alice", "RUNNING", 0, 3, array_job_id=12, task_id=3)
    assert mail_environment(MailType.BEGIN, task, "hal")["SLURM_ARRAY_TASK_ID"] == "3"


@pytest.mark.parametrize(
    "text",
    ["-Ssendmail=/tmp/evil", "--exec=/tmp/evil", "-", "", " ", "bob @x.org", "bob\t@x", "a\nb",
     "a\x00b", "a\x7fb", "a\u2028b"],
)  # fmt: skip
def test_a_mail_user_the_mail_program_could_read_as_an_option_is_refused(text: str) -> None:
    """[mail] prog gets the recipient as an argument after ``-s SUBJECT``: one starting
    with ``-`` would be an option of the program (``-Ssendmail=...`` runs a program as the
    server's user), and spaces or control characters are no address either."""
    with pytest.raises(InvalidRequest) as err:
        check_mail_user(text)
    assert err.value.message.startswith(f"--mail-user={text!r} invalid: "), err.value.message
    assert err.value.field == "mail-user"


@pytest.mark.parametrize("text", ["bob", "bob@x.org", "a@x.org,b@y.org", "Bob.O'Neil+jobs@x"])
def test_an_address_is_kept_as_written(text: str) -> None:
    assert check_mail_user(text) == text
