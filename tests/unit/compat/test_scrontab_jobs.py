"""What scrontab sends for each entry of a crontab: the entry's ``#SCRON`` options read
as sbatch reads them (for that entry only), its command as a ``/bin/sh`` script started
in the user's home, the user's environment; a bad option names its line."""

from __future__ import annotations

import io

import pytest

from hal.compat.commands import run
from hal.compat.scrontab import build_jobs
from hal.core.errors import InvalidRequest, UnsupportedOption
from hal.wire.submit import JobSubmit

ENV = {"HOME": "/home/alice", "PATH": "/usr/bin", "PROJECT": "x"}
FILE = """\
#SCRON -p debug -t 5 -c 2 --mem=1G
#SCRON -J nightly -A physics -q high -N 1 -o /tmp/n-%j.out
30 2 * * * ./nightly.sh --all > /dev/null
@hourly /usr/bin/date
"""


def jobs(text: str) -> list[JobSubmit]:
    return build_jobs(text, environ=ENV, cwd="/work", now=1_700_000_000.0)


def test_scron_options_go_to_their_entry_only() -> None:
    nightly, hourly = jobs(FILE)
    assert nightly.partition == "debug"
    assert nightly.time_limit_seconds == 300
    assert nightly.cpus_per_task == 2
    assert nightly.memory_per_node_bytes == 2**30
    assert (nightly.name, nightly.account, nightly.qos) == ("nightly", "physics", "high")
    assert (nightly.nodes_min, nightly.nodes_max) == (1, 1)
    assert nightly.stdout == "/tmp/n-%j.out"
    assert nightly.script == "#!/bin/sh\n./nightly.sh --all > /dev/null\n"
    # the next entry gets none of them
    assert hourly.partition is None and hourly.time_limit_seconds is None
    assert hourly.name == "date"
    assert hourly.script == "#!/bin/sh\n/usr/bin/date\n"


def test_a_job_runs_in_the_home_with_the_users_environment() -> None:
    (job,) = jobs("* * * * * env\n")
    assert job.workdir == "/home/alice"
    env = dict(job.environment)
    assert env["PROJECT"] == "x"
    assert env["SLURM_SUBMIT_DIR"] == "/home/alice"


@pytest.mark.parametrize(
    ("text", "start", "error"),
    [
        ("#SCRON -t nonsense\n* * * * * x\n", "line 2: ", InvalidRequest),
        ("#SCRON --no-such-option\n* * * * * x\n", "line 1: ", UnsupportedOption),
        ("# c\n#SCRON --array=1-3\n* * * * * x\n", "line 2: --array", UnsupportedOption),
        ("#SCRON -p debug extra\n* * * * * x\n", "line 1: unexpected 'extra'", InvalidRequest),
        ("* * * * * x\n0 0 32 * * y\n", "line 2: ", InvalidRequest),
    ],
)
def test_a_bad_entry_is_refused_with_its_line(text: str, start: str, error: type) -> None:
    with pytest.raises(error) as caught:
        jobs(text)
    assert caught.value.message.startswith(start), caught.value.message


@pytest.mark.parametrize("argv", [[], ["-l", "-r"], ["-x"], ["-u"], ["a", "b"]])
def test_wrong_arguments_print_the_usage(argv: list[str]) -> None:
    err = io.StringIO()
    code = run("scrontab", argv, stdout=io.StringIO(), stderr=err, environ=ENV, cwd="/work")
    assert code == 1
    assert "Usage: scrontab [-u user]" in err.getvalue()
