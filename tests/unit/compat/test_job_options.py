"""``--signal``'s ``R:``, ``-k``/``--no-kill``, ``--priority`` and ``--exclusive=user`` in
sbatch, salloc and srun, as Slurm 22.05.8 reads them (docs/slurm-checks.md,
"Job options"): each was refused by HAL before."""

from __future__ import annotations

import pytest

from hal.compat.options import parse_options
from hal.compat.salloc_options import parse_salloc
from hal.compat.sbatch import ignored_variables, parse_sbatch
from hal.compat.srun import OPTIONS as SRUN_OPTIONS
from hal.compat.srun import parse_command
from hal.compat.srun_alloc import allocation_argv
from hal.core.errors import InvalidRequest, UnsupportedOption
from hal.slurm.syntax import parse_signal
from hal.wire.submit import JobSubmit


def sbatch(*argv: str, **environ: str) -> JobSubmit:
    return parse_sbatch(
        [*argv, "--wrap", "true"], environ=environ, cwd="/w", read_stdin=str, now=0.0
    ).job


def salloc(*argv: str, **environ: str) -> JobSubmit:
    return parse_salloc([*argv, "true"], environ=environ, cwd="/w", now=0.0).job


@pytest.mark.parametrize(
    ("text", "batch_only", "seconds"),
    [
        ("R:USR1@30", False, 30),
        ("RB:USR1@5", True, 5),
        ("BR:USR1", True, 60),
        ("r:usr1", False, 60),
    ],
)
def test_sbatch_takes_the_reservation_prefix(text: str, batch_only: bool, seconds: int) -> None:
    """Slurm 22.05.8's sbatch takes R: (alone or with B:, either order); HAL refused it."""
    assert sbatch(f"--signal={text}").signal == text
    spec = parse_signal(text)
    assert (spec.batch_only, spec.seconds_before) == (batch_only, seconds)


@pytest.mark.parametrize(
    "text", ["B:R:USR1", "FOO", "USR1@abc", "USR1@-5", "USR1@70000", "0", "@5", ""]
)
def test_a_bad_signal_is_slurms_invalid_specification(text: str) -> None:
    with pytest.raises(InvalidRequest, match=r"^Invalid --signal specification"):
        sbatch(f"--signal={text}")


def test_salloc_and_srun_refuse_the_batch_shells_signal() -> None:
    """Neither has a batch shell: Slurm 22.05.8 refuses B: in both."""
    assert salloc("--signal=R:USR1@30").signal == "R:USR1@30"
    with pytest.raises(InvalidRequest, match=r"^Invalid --signal specification"):
        salloc("--signal=B:USR1")
    with pytest.raises(InvalidRequest, match=r"^Invalid --signal specification"):
        parse_command(["--signal=B:USR1", "true"], {})
    with pytest.raises(InvalidRequest, match=r"^Invalid --signal specification"):
        parse_command(["true"], {"SLURM_SIGNAL": "B:USR1"})


@pytest.mark.parametrize(
    ("argv", "environ"),
    [(["-k"], {}), (["--no-kill"], {}), (["--no-kill=off"], {}), (["--no-kill=NO"], {}),
     ([], {"SBATCH_NO_KILL": "off"})],
)  # fmt: skip
def test_no_kill_is_taken(argv: list[str], environ: dict[str, str]) -> None:
    sbatch(*argv, **environ)
    assert ignored_variables(environ) == []  # (SBATCH_NO_KILL is no longer "ignored")


@pytest.mark.parametrize(
    ("argv", "environ"), [(["--no-kill=yes"], {}), ([], {"SBATCH_NO_KILL": "1"})]
)
def test_no_kill_takes_only_off(argv: list[str], environ: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest, match=r"^Invalid --no-kill specification"):
        sbatch(*argv, **environ)


@pytest.mark.parametrize(
    ("value", "priority"),
    [("100", 100), ("TOP", 4294967293), ("top", 4294967293), ("abc", None), ("0", None),
     ("4294967293", 4294967293), ("12abc", 12)],
)  # fmt: skip
def test_priority_reads_as_slurms(value: str, priority: int | None) -> None:
    assert sbatch(f"--priority={value}").priority == priority
    assert salloc(f"--priority={value}").priority == priority


@pytest.mark.parametrize(
    ("value", "message"),
    [("-5", "Priority must be >= 0"), ("4294967294", "Priority must be < 4294967294")],
)
def test_priority_out_of_range_is_refused(value: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=f"^{message}"):
        sbatch(f"--priority={value}")
    with pytest.raises(InvalidRequest, match=f"^{message}"):
        parse_command([f"--priority={value}", "true"], {})


@pytest.mark.parametrize(
    ("value", "exclusive", "user"),
    [(None, True, False), ("exclusive", True, False), ("user", False, True),
     ("USER", False, True), ("oversubscribe", False, False)],
)  # fmt: skip
def test_exclusive_modes(value: str | None, exclusive: bool, user: bool) -> None:
    option = "--exclusive" if value is None else f"--exclusive={value}"
    job = sbatch(option)
    assert (job.exclusive, job.exclusive_user) == (exclusive, user)
    assert salloc(f"--exclusive={value or 'exclusive'}").exclusive_user == user
    assert sbatch(SBATCH_EXCLUSIVE=value or "exclusive").exclusive_user == user
    assert salloc(SALLOC_EXCLUSIVE=value or "exclusive").exclusive_user == user


def test_exclusive_refusals() -> None:
    with pytest.raises(InvalidRequest, match=r"^Invalid --exclusive specification"):
        sbatch("--exclusive=foo")
    with pytest.raises(UnsupportedOption, match="MCS"):
        sbatch("--exclusive=mcs")
    with pytest.raises(InvalidRequest, match=r"^Invalid --exclusive specification"):
        parse_command(["--exclusive=foo", "true"], {})


def test_srun_in_a_job_takes_them_and_only_plain_exclusive_is_exact() -> None:
    """In a job the allocation options change nothing (Slurm 22.05.8's srun ran each);
    --exclusive alone is the step's --exact, =user is not."""
    call = parse_command(
        ["--signal=R:USR1@5", "-k", "--priority=5", "--exclusive=user", "true"], {}
    )
    assert not call.request.exact
    assert parse_command(["--exclusive", "true"], {}).request.exact


def test_srun_passes_them_and_its_variables_to_its_own_allocation() -> None:
    argv = ["-k", "--priority=5", "--exclusive=user", "true"]
    call = parse_command(argv, {})
    parsed = parse_options(argv, SRUN_OPTIONS, stop_at_positional=True)
    env = {"SLURM_SIGNAL": "USR2@30", "SLURM_NO_KILL": "off"}
    assert allocation_argv(parsed, call, env) == [
        "--signal", "USR2@30", "--no-kill", "--priority", "5", "--exclusive=user",
        "--job-name=true",
    ]  # fmt: skip
    given = ["--signal=USR1", "true"]
    parsed = parse_options(given, SRUN_OPTIONS, stop_at_positional=True)
    assert allocation_argv(parsed, parse_command(given, {}), env)[:3] == [
        "--no-kill=off", "--signal", "USR1",
    ]  # fmt: skip
