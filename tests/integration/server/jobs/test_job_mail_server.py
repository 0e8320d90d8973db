"""Job mail end to end: sbatch's --mail-type/--mail-user reach the control plane, which
runs [mail] prog as slurmctld runs MailProg (``prog -s SUBJECT RECIPIENT`` with SLURM_JOB_*
variables). The program here is a script that appends what it was given to a file; a
missing, failing or hanging program leaves the jobs as they would be without mail."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.mail import MailConfig
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

# one line per mail: argv, then the variables Slurm gives MailProg
RECORDER = """#!/bin/sh
printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' "$1" "$2" "$3" "$SLURM_JOB_ID" \
  "$SLURM_JOB_MAIL_TYPE" "$SLURM_JOB_STATE" "$SLURM_JOB_EXIT_CODE_MAX" "$SLURM_JOB_USER" \
  "$SLURM_CLUSTER_NAME" >> {log}
"""
SUBJECT = re.compile(r"Slurm (?:Array \w+ )?Job_id=(\d+)")


class Mails:
    """The recorder's log, read as (subject, recipient, variables) per mail."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[tuple[str, str, dict[str, str]]]:
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text().splitlines():
            flag, subject, to, job, kind, state, code, user, cluster = line.split("\t")
            assert flag == "-s", line
            env = {"id": job, "type": kind, "state": state, "code": code, "user": user}
            found.append((subject, to, {**env, "cluster": cluster}))
        return found

    def of(self, job_id: int) -> list[str]:
        return [
            s for s, _, _ in self.all() if (m := SUBJECT.match(s)) and m.group(1) == str(job_id)
        ]

    def wait(self, job_id: int, count: int) -> list[str]:
        wait_until(lambda: len(self.of(job_id)) >= count, 30, message=f"{count} mails of {job_id}")
        return self.of(job_id)


@pytest.fixture(scope="module")
def mailed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Mails]]:
    base = tmp_path_factory.mktemp("mail")
    log = base / "mails.log"
    prog = base / "mailprog"
    prog.write_text(RECORDER.format(log=log))
    prog.chmod(0o755)
    config = {"kill_wait_seconds": 1, "mail": MailConfig(prog=str(prog), domain="example.org")}
    with (
        LiveServer(base / "hal", config_overrides=config) as server,
        server.agents(1, cpus=4, memory="1G"),
    ):
        yield server, Mails(log)


def _sbatch(live: LiveServer, tmp_path: Path, *args: str) -> int:
    out = live.cli("sbatch", "--parsable", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def _state(live: LiveServer, job_id: int) -> str:
    with live.client() as c:
        return c.job(job_id).state


def _in_order(subjects: list[str]) -> tuple[str, str]:
    """A start's mail and an end's (two programs run at once: either may write first)."""
    assert len(subjects) == 2, subjects
    began, ended = sorted(subjects, key=lambda s: " Began" not in s)
    return began, ended


def _flush(live: LiveServer, mails: Mails, tmp_path: Path) -> None:
    """A job whose BEGIN mail comes after every mail posted before it: past it, a mail
    that was due is in the log."""
    marker = _sbatch(live, tmp_path, "--mail-type=BEGIN", "--wrap", "true")
    mails.wait(marker, 1)


def test_begin_and_end(mailed: tuple[LiveServer, Mails], tmp_path: Path) -> None:
    live, mails = mailed
    job = _sbatch(
        live, tmp_path, "-J", "foo", "--mail-type=BEGIN,END", "--mail-user=bob@x.org", "--wrap",
        "true",
    )  # fmt: skip
    began, ended = _in_order(mails.wait(job, 2))
    assert re.fullmatch(rf"Slurm Job_id={job} Name=foo Began, Queued time \d\d:\d\d:\d\d", began)
    assert re.fullmatch(
        rf"Slurm Job_id={job} Name=foo Ended, Run time \d\d:\d\d:\d\d, COMPLETED, ExitCode 0",
        ended,
    )
    envs = sorted(
        ((to, env) for s, to, env in mails.all() if s in (began, ended)), key=lambda e: e[1]["type"]
    )
    assert [to for to, _ in envs] == ["bob@x.org", "bob@x.org"]
    assert [e["type"] for _, e in envs] == ["Began", "Ended"]
    assert envs[1][1] | {"type": ""} == {
        "id": str(job), "type": "", "state": "COMPLETED", "code": "0", "user": "admin",
        "cluster": "hal",
    }  # fmt: skip
    shown = live.cli("scontrol", "show", "job", str(job))
    assert "   MailUser=bob@x.org MailType=BEGIN,END" in shown.stdout.splitlines()


def test_fail_goes_to_the_user_at_the_mail_domain(
    mailed: tuple[LiveServer, Mails], tmp_path: Path
) -> None:
    live, mails = mailed
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mail-type=FAIL\n#SBATCH -J failer\nexit 3\n")
    job = _sbatch(live, tmp_path, str(script))
    (failed,) = mails.wait(job, 1)
    assert re.fullmatch(
        rf"Slurm Job_id={job} Name=failer Failed, Run time \d\d:\d\d:\d\d, FAILED, ExitCode 3",
        failed,
    )
    (to,) = [to for s, to, _ in mails.all() if s == failed]
    assert to == "admin@example.org"  # no --mail-user: the submitter at [mail] domain


def test_time_limit_warnings_and_the_limit(
    mailed: tuple[LiveServer, Mails], tmp_path: Path
) -> None:
    live, mails = mailed
    job = _sbatch(
        live, tmp_path, "-t", "0:04", "--mail-type=TIME_LIMIT_50,TIME_LIMIT,FAIL", "--wrap",
        "sleep 300",
    )  # fmt: skip
    wait_until(lambda: _state(live, job) == "TIMEOUT", 60, message="the limit")
    got = mails.wait(job, 3)
    assert len(got) == 3, got
    half = [s for s in got if "Reached 50% of time limit" in s]
    assert len(half) == 1 and re.fullmatch(r".*, Run time 00:00:0[2-4]", half[0]), got
    assert sum("Reached time limit" in s for s in got) == 1, got
    assert next(s for s in got if " Failed, " in s).endswith(", TIMEOUT, ExitCode 0"), got


def test_requeue(mailed: tuple[LiveServer, Mails], tmp_path: Path) -> None:
    live, mails = mailed
    job = _sbatch(live, tmp_path, "--mail-type=REQUEUE", "--wrap", "sleep 300")
    wait_until(lambda: _state(live, job) == "RUNNING", message="the job running")
    out = live.cli("scontrol", "requeue", str(job))
    assert out.returncode == 0, out.stderr
    (requeued,) = mails.wait(job, 1)
    assert re.fullmatch(
        rf"Slurm Job_id={job} Name=wrap Requeued, Run time \d\d:\d\d:\d\d", requeued
    )
    live.cli("scancel", str(job))


def test_a_dependency_that_can_never_be_met(
    mailed: tuple[LiveServer, Mails], tmp_path: Path
) -> None:
    live, mails = mailed
    failing = _sbatch(live, tmp_path, "--wrap", "exit 1")
    job = _sbatch(
        live, tmp_path, "--mail-type=INVALID_DEPEND", f"--dependency=afterok:{failing}", "--wrap",
        "true",
    )  # fmt: skip
    (mail,) = mails.wait(job, 1)
    assert mail == f"Slurm Job_id={job} Name=wrap Invalid dependency"
    live.cli("scancel", str(job))


def test_an_array_mails_its_summary_unless_array_tasks(
    mailed: tuple[LiveServer, Mails], tmp_path: Path
) -> None:
    live, mails = mailed
    array = _sbatch(live, tmp_path, "--array=0-2", "--mail-type=BEGIN,END", "--wrap", "true")
    tasks = _sbatch(
        live, tmp_path, "--array=0-1", "--mail-type=END,ARRAY_TASKS", "--wrap", "exit 0"
    )
    wait_until(lambda: len(mails.of(array)) >= 2 and len(mails.of(tasks)) >= 2, 60, message="mail")
    _flush(live, mails, tmp_path)
    began, ended = _in_order(mails.of(array))
    assert began.startswith(f"Slurm Array Summary Job_id={array}_* ({array}) Name=wrap Began, ")
    assert re.fullmatch(
        rf"Slurm Array Summary Job_id={array}_\* \({array}\) Name=wrap Ended, "
        r"Run time \d\d:\d\d:\d\d, COMPLETED, ExitCode \[0-0\]",
        ended,
    )
    with live.client() as c:
        ids = {i: c.job(f"{tasks}_{i}").id for i in (0, 1)}
    per_task = sorted(mails.of(tasks))
    assert len(per_task) == 2, per_task
    for i, line in enumerate(per_task):
        assert re.fullmatch(
            rf"Slurm Array Task Job_id={tasks}_{i} \({ids[i]}\) Name=wrap Ended, "
            r"Run time \d\d:\d\d:\d\d, COMPLETED, ExitCode 0",
            line,
        ), per_task


def test_none_sends_nothing(mailed: tuple[LiveServer, Mails], tmp_path: Path) -> None:
    live, mails = mailed
    none = _sbatch(live, tmp_path, "--mail-type=NONE", "--wrap", "exit 1")
    plain = _sbatch(live, tmp_path, "--wrap", "true")
    wait_until(lambda: _state(live, none) == "FAILED" and _state(live, plain) == "COMPLETED")
    _flush(live, mails, tmp_path)
    assert mails.of(none) == [] and mails.of(plain) == []
    shown = live.cli("scontrol", "show", "job", str(plain)).stdout
    assert "MailUser=admin@example.org MailType=NONE" in shown


def test_an_unknown_mail_type_is_refused(mailed: tuple[LiveServer, Mails], tmp_path: Path) -> None:
    live, _ = mailed
    out = live.cli("sbatch", "--mail-type=BEGIN,BOGUS", "--wrap", "true", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip() == "sbatch: error: --mail-type=BEGIN,BOGUS invalid", out.stderr
    with live.client() as c, pytest.raises(Exception, match="mail-type=BOGUS invalid"):
        c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), mail_type="BOGUS"))


def test_a_mail_user_the_program_would_read_as_an_option_is_refused(
    mailed: tuple[LiveServer, Mails], tmp_path: Path
) -> None:
    """``[mail] prog -s SUBJECT -Ssendmail=/x`` would run /x as the server's user under
    s-nail: such a --mail-user is refused at submission, by sbatch and by the REST API."""
    live, _ = mailed
    evil = tmp_path / "evil"
    out = live.cli(
        "sbatch", f"--mail-user=-Ssendmail={evil}", "--mail-type=ALL", "--wrap", "true",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"sbatch: error: --mail-user='-Ssendmail={evil}' invalid: an address may not start with '-'"
    ), out.stderr
    for bad in ("--exec=/bin/true", "", "a b@x.org"):
        submit = JobSubmit(
            script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), mail_type="ALL", mail_user=bad
        )
        with live.client() as c, pytest.raises(Exception, match=r"--mail-user=.* invalid: "):
            c.submit(submit)
    with live.client() as c:
        assert not [j for j in c.jobs() if j.mail_user in ("--exec=/bin/true", "a b@x.org")]


def _metric(live: LiveServer, result: str) -> float:
    text = http.get(f"{live.url}/metrics", timeout=10).text
    found = re.search(rf'^hal_job_mail_total{{result="{result}"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize(
    ("program", "result"),
    [
        (None, "missing"),
        ("#!/bin/sh\necho 'relay refused' >&2\nexit 1\n", "failed"),
        ("#!/bin/sh\nexec sleep 60\n", "timeout"),
    ],
)
def test_a_missing_or_failing_program_leaves_jobs_alone(
    tmp_path: Path, program: str | None, result: str
) -> None:
    prog = tmp_path / "mailprog"
    if program is not None:
        prog.write_text(program)
        prog.chmod(0o755)
    config = {"mail": MailConfig(prog=str(prog), timeout_seconds=0.5)}
    with (
        LiveServer(tmp_path / "hal", config_overrides=config) as live,
        live.agents(1, cpus=2, memory="1G"),
    ):
        jobs = [_sbatch(live, tmp_path, "--mail-type=ALL", "--wrap", "true") for _ in range(2)]
        wait_until(lambda: all(_state(live, j) == "COMPLETED" for j in jobs), 60)
        # BEGIN and END of each
        wait_until(lambda: _metric(live, result) >= 4, 30, message=f"4 mails {result}")
        assert _metric(live, "sent") == 0
        shown = live.cli("scontrol", "show", "config").stdout
        assert re.search(rf"^MailProg\s+= {re.escape(str(prog))}$", shown, re.MULTILINE), shown
        assert re.search(r"^MailDomain\s+= \(null\)$", shown, re.MULTILINE), shown
