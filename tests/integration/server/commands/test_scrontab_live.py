"""scrontab against a real control plane (docs/user/scrontab.md): a user's crontab is stored
and printed back as saved, each entry keeps one job pending until its next run (reason
BeginTime), ``-r`` and a new file cancel the old entries' pending jobs, a bad line is
refused with its number and the old crontab stays, scancel comments an entry out.
The one test with an agent waits for a real minute boundary (up to ~65 s): HAL has no
test-only time scale, and the run must be the server's own doing."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from hal.client import HalClient
from hal.compat.commands import run
from hal.testing.live import LiveServer, wait_until

FAR = "0 0 1 1 *"  # next New Year: never due during a test


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv")) as live:
        yield live


@pytest.fixture(scope="module")
def tokens(server: LiveServer) -> dict[str, str]:
    return server.add_users("alice", "bob", "carol", "dave")


def scrontab(
    server: LiveServer, token: str, *argv: str, stdin: str = "", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = run(
        "scrontab",
        list(argv),
        client_factory=lambda: HalClient(server.url, token),
        stdout=out,
        stderr=err,
        stdin=io.StringIO(stdin),
        environ={"HOME": "/tmp", **(env or {})},
        cwd="/tmp",
    )
    return rc, out.getvalue(), err.getvalue()


def cron_jobs(server: LiveServer, user: str) -> dict[int, tuple[str, str, float | None]]:
    """(state, reason, EligibleTime: a pending job's begin time) of ``user``'s jobs by id."""
    with server.client() as c:
        found = c.jobs(users=[user], include_finished=True)
        return {j.id: (j.state, j.reason, j.eligible_time) for j in found}


def test_the_list_prints_back_what_was_saved_and_entries_pend_until_their_time(
    server: LiveServer, tokens: dict[str, str]
) -> None:
    text = f"# mine\n#SCRON -t 5 -J first\n{FAR} echo one\n\n@yearly echo two\n"
    rc, _, err = scrontab(server, tokens["alice"], "-", stdin=text)
    assert rc == 0, err
    assert scrontab(server, tokens["alice"], "-l") == (0, text, "")
    jobs = cron_jobs(server, "alice")
    assert len(jobs) == 2
    new_year = datetime(datetime.now().year + 1, 1, 1).timestamp()
    for state, _, begin in jobs.values():
        assert state == "PENDING"
        assert begin == new_year
    wait_until(
        lambda: {r for _, r, _ in cron_jobs(server, "alice").values()} == {"BeginTime"},
        message="the scheduler to give the cron jobs reason BeginTime",
    )
    first = min(jobs)
    out = io.StringIO()
    shown = run(
        "scontrol",
        ["show", "job", str(first)],
        client_factory=lambda: HalClient(server.url, tokens["alice"]),
        stdout=out,
        stderr=io.StringIO(),
    )
    assert shown == 0
    assert f"CronJob=Yes CrontabSpec={FAR}" in out.getvalue()
    assert "JobName=first" in out.getvalue()
    assert "TimeLimit=00:05:00" in out.getvalue()


def test_a_new_file_or_remove_cancels_the_old_entries_pending_jobs(
    server: LiveServer, tokens: dict[str, str]
) -> None:
    token = tokens["bob"]
    assert scrontab(server, token, "-", stdin=f"{FAR} echo a\n{FAR} echo b\n")[0] == 0
    old = set(cron_jobs(server, "bob"))
    assert scrontab(server, token, "-", stdin=f"{FAR} echo c\n")[0] == 0
    jobs = cron_jobs(server, "bob")
    assert {jobs[i][0] for i in old} == {"CANCELLED"}
    (new,) = set(jobs) - old
    assert jobs[new][0] == "PENDING"
    assert scrontab(server, token, "-r")[0] == 0
    assert cron_jobs(server, "bob")[new][0] == "CANCELLED"
    rc, _, err = scrontab(server, token, "-l")
    assert rc == 1
    assert "no crontab for bob" in err


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("0 25 * * * echo late", "line 2: Bad hour"),
        ("#SCRON --bogus\n@daily x", "line 2: "),
        ("#SCRON -p nosuchpartition\n@daily x", "line 3: Invalid partition name"),
    ],
)
def test_a_bad_line_is_refused_and_the_old_crontab_stays(
    server: LiveServer, tokens: dict[str, str], line: str, reason: str
) -> None:
    token = tokens["carol"]
    good = f"{FAR} echo kept\n"
    assert scrontab(server, token, "-", stdin=good)[0] == 0
    before = {i: s for i, (s, _, _) in cron_jobs(server, "carol").items()}
    rc, _, err = scrontab(server, token, "-", stdin=f"{FAR} echo new\n{line}\n")
    assert rc == 1
    assert f"scrontab: error: {reason}" in err
    assert scrontab(server, token, "-l")[1] == good
    assert {i: s for i, (s, _, _) in cron_jobs(server, "carol").items()} == before


def test_edit_saves_a_valid_file_and_refuses_a_bad_one(
    server: LiveServer, tokens: dict[str, str], tmp_path: Path
) -> None:
    token = tokens["carol"]
    new = tmp_path / "new"
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\ncp {new} "$1"\n')
    editor.chmod(0o755)
    new.write_text(f"{FAR} echo edited\n")
    rc, _, err = scrontab(server, token, "-e", env={"EDITOR": str(editor)})
    assert rc == 0, err
    assert scrontab(server, token, "-l")[1] == f"{FAR} echo edited\n"
    new.write_text("61 * * * * echo bad\n")
    rc, _, err = scrontab(server, token, "-e", env={"VISUAL": str(editor)})
    assert rc == 1
    assert "line 1: Bad minute" in err
    assert scrontab(server, token, "-l")[1] == f"{FAR} echo edited\n"


def test_scancel_of_a_cron_job_comments_its_entry_out(
    server: LiveServer, tokens: dict[str, str]
) -> None:
    token = tokens["dave"]
    text = f"#SCRON -t 1\n{FAR} echo gone\n{FAR} echo stays\n"
    assert scrontab(server, token, "-", stdin=text)[0] == 0
    first = min(cron_jobs(server, "dave"))
    with HalClient(server.url, token) as c:
        c.cancel(first)
    listed = scrontab(server, token, "-l")[1]
    assert listed == (f"#DISABLED: #SCRON -t 1\n#DISABLED: {FAR} echo gone\n{FAR} echo stays\n")
    assert cron_jobs(server, "dave")[first][0] == "CANCELLED"


def test_only_an_administrator_uses_another_users_crontab(
    server: LiveServer, tokens: dict[str, str]
) -> None:
    rc, _, err = scrontab(server, tokens["alice"], "-", stdin=f"{FAR} echo mine\n")
    assert rc == 0, err
    rc, _, err = scrontab(server, tokens["dave"], "-u", "alice", "-l")
    assert rc == 1
    assert "only an administrator" in err
    rc, out, _ = scrontab(server, server.token, "-u", "alice", "-l")
    assert rc == 0
    assert "echo mine" in out


@pytest.mark.slow  # waits for the wall clock's next minute, twice
def test_an_every_minute_entry_runs_at_the_minute_and_pends_again_under_its_id(
    tmp_path: Path,
) -> None:
    """The one test that waits for the clock: BeginTime is the next minute boundary, the
    job runs once it passes, and then waits for the following minute under its id."""
    with LiveServer(tmp_path / "srv") as live, live.agents(1):
        marker = tmp_path / "ran"
        line = f"* * * * * date +%s >> {marker}\n"
        rc, _, err = scrontab(live, live.token, "-", stdin=line, env={"HOME": str(tmp_path)})
        assert rc == 0, err
        ((job_id, (state, _, begin)),) = cron_jobs(live, "admin").items()
        now = time.time()
        assert state == "PENDING"
        assert begin is not None and begin % 60 == 0 and now < begin <= now + 60
        wait_until(
            lambda: marker.exists() and marker.read_text().endswith("\n"),
            timeout=begin - time.time() + 30,
            message="the cron run",
        )
        ran_at = int(marker.read_text().split()[0])
        assert ran_at >= begin
        wait_until(
            lambda: (
                cron_jobs(live, "admin")[job_id][0] == "PENDING"
                and (cron_jobs(live, "admin")[job_id][2] or 0) > begin
            ),
            message="the job to be queued again for the next minute",
        )
        state, _, again = cron_jobs(live, "admin")[job_id]
        assert again == begin + 60 or again == begin + 120  # the run may end past :00
        assert set(cron_jobs(live, "admin")) == {job_id}


def test_the_crontab_and_its_jobs_outlive_a_server_restart(each_store: LiveServer) -> None:
    """On SQLite and PostgreSQL: the file and its entry's pending job (with its entry)
    are read back after a restart, and scancel then still finds the entry to disable."""
    text = f"#SCRON -t 2\n{FAR} echo kept\n"
    assert scrontab(each_store, each_store.token, "-", stdin=text)[0] == 0
    (job_id,) = cron_jobs(each_store, "admin")
    each_store.stop()
    each_store.start()
    assert scrontab(each_store, each_store.token, "-l")[1] == text
    with each_store.client() as c:
        assert c.job(job_id).cron == FAR
        c.cancel(job_id)
    listed = scrontab(each_store, each_store.token, "-l")[1]
    assert listed == f"#DISABLED: #SCRON -t 2\n#DISABLED: {FAR} echo kept\n"
