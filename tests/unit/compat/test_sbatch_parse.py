"""``#SBATCH`` scripts and sbatch argv → JobSubmit: every option of the v1 compat set."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from hal.compat.exports import export_environment
from hal.compat.sbatch import (
    SbatchRequest,
    directive_lines,
    ignored_variables,
    parse_sbatch,
    split_directive,
)
from hal.core.errors import InvalidRequest, UnsupportedOption
from hal.wire.submit import non_defaults

NOW = 1_800_000_000.0
SCRIPT = "#!/bin/bash\necho hi\n"


def parse(
    *argv: str, script: str = SCRIPT, environ: dict[str, str] | None = None, cwd: str = "/work"
) -> SbatchRequest:
    return parse_sbatch(
        list(argv),
        environ=environ if environ is not None else {"PATH": "/bin", "SLURM_CONF": "/x"},
        cwd=cwd,
        read_stdin=lambda: script,
        now=NOW,
    )


def job_fields(*argv: str, script: str = SCRIPT) -> dict[str, Any]:
    return non_defaults(parse(*argv, script=script).job)


def test_a_deadline_before_begin_is_refused_and_sbatch_deadline_is_read() -> None:
    """Slurm's sbatch: "Incompatible begin and deadline time specification"; its
    SBATCH_DEADLINE input variable sets --deadline."""
    with pytest.raises(InvalidRequest, match="Incompatible begin and deadline"):
        parse("-b", "now+2hours", "--deadline=now+1hour")
    env = {"PATH": "/bin", "SBATCH_DEADLINE": "now+30minutes"}
    assert parse(environ=env).job.deadline == NOW + 1800


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-J", "x"], {"name": "x"}),
        (["--job-name=x y"], {"name": "x y"}),
        (["-o", "out-%j.txt"], {"stdout": "out-%j.txt"}),
        (["--error=err.txt"], {"stderr": "err.txt"}),
        (["-p", "gpu,debug"], {"partition": "gpu,debug"}),
        (["--partition", " a , b "], {"partition": "a,b"}),
        (["-N", "2"], {"nodes_min": 2, "nodes_max": 2}),  # max sent: -N was given
        (["--nodes=2-4"], {"nodes_min": 2, "nodes_max": 4}),
        (["-n", "8"], {"ntasks": 8}),
        (["--ntasks-per-node=4"], {"ntasks_per_node": 4}),
        (["-c", "4"], {"cpus_per_task": 4}),
        (["--mem=4G"], {"memory_per_node_bytes": 4 << 30}),
        (["--mem", "4000"], {"memory_per_node_bytes": 4000 << 20}),
        (["--mem=0"], {"memory_per_node_bytes": 0}),
        (["--mem-per-cpu=2G"], {"memory_per_cpu_bytes": 2 << 30}),
        (["--mem-per-gpu=20g"], {"memory_per_gpu_bytes": 20 << 30}),
        (["--gres=gpu:2"], {"gpus_per_node": 2}),
        (["--gres", "gpu:a100:4"], {"gpus_per_node": 4, "gpu_type": "a100"}),
        (["-G", "8"], {"gpus": 8}),
        (["--gpus=h100:2"], {"gpus": 2, "gpu_type": "h100"}),
        (["--gpus-per-node=2"], {"gpus_per_node": 2}),
        (["--gpus-per-task=1"], {"gpus_per_task": 1}),
        (["-t", "1:00:00"], {"time_limit_seconds": 3600}),
        (["--time=2-00:00:00"], {"time_limit_seconds": 172800}),
        (["-t", "0"], {"time_limit_seconds": 0}),
        (["-a", "0-15%4"], {"array": "0-15%4"}),
        (["--array=1,3,5"], {"array": "1,3,5"}),
        (["-d", "afterok:12"], {"dependency": "afterok:12"}),
        (["--dependency=afterany:1?afterok:2"], {"dependency": "afterany:1?afterok:2"}),
        (["--kill-on-invalid-dep=yes"], {"kill_on_invalid_dep": True}),
        (["-A", "proj"], {"account": "proj"}),
        (["-q", "high"], {"qos": "high"}),
        (["-C", "a100&ib"], {"constraint": ["a100", "ib"]}),
        (["--constraint=a,b"], {"constraint": ["a", "b"]}),
        (["-x", "n[1-2]"], {"exclude": ["n1", "n2"]}),
        (["-w", "n[3-4],m1"], {"nodelist": ["n3", "n4", "m1"]}),
        (["-H"], {"hold": True}),
        (["-b", "now+60"], {"begin_time": NOW + 60}),
        (["--deadline=now+2hours"], {"deadline": NOW + 7200}),
        (["--mincpus=4"], {"min_cpus_per_node": 4}),
        (
            ["-b", "now+60", "--deadline", "now+1hour"],
            {"begin_time": NOW + 60, "deadline": NOW + 3600},
        ),
        (["--no-requeue"], {"requeue": False}),
        (["--no-requeue", "--requeue"], {}),
        (["--signal=B:USR2@30"], {"signal": "B:USR2@30"}),
        (["--exclusive"], {"exclusive": True}),
        (["--comment=run 7"], {"comment": "run 7"}),
        (["--open-mode=append", "--wckey=submitit"], {"open_mode": "append", "wckey": "submitit"}),
        (["--open-mode=t"], {"open_mode": "truncate"}),
        (["--nice"], {"nice": 100}),
        (["--nice=-5"], {"nice": -5}),
        (["--mail-type=END", "--mail-user=a@b"], {"mail_type": "END", "mail_user": "a@b"}),
    ],
)
def test_option_maps_to_field(argv: list[str], expected: dict[str, Any]) -> None:
    fields = job_fields(*argv)
    fields.pop("script")
    fields.pop("environment")
    fields.pop("workdir")
    assert fields == expected


def test_defaults_from_the_submitter() -> None:
    """No options: name "sbatch" (stdin), the current directory, the whole environment."""
    job = parse(cwd="/home/a").job
    assert job.name == "sbatch"
    assert job.workdir == "/home/a"
    assert job.environment == {
        "PATH": "/bin",
        "SLURM_CONF": "/x",
        "SLURM_SUBMIT_DIR": "/home/a",
        "HAL_SUBMIT_DIR": "/home/a",
    }
    assert job.script == SCRIPT


def test_flags_for_the_command() -> None:
    request = parse("--parsable", "-W", "--test-only", "-Q", "-v", "-v")
    assert (request.parsable, request.wait, request.test_only, request.quiet) == (
        True,
        True,
        True,
        True,
    )
    assert request.verbose == 2


def test_chdir_relative_to_cwd() -> None:
    assert parse("-D", "sub/../run").job.workdir == "/work/run"
    assert parse("--chdir=/abs").job.workdir == "/abs"


def test_submit_dir_is_where_sbatch_ran_not_chdir() -> None:
    """As Slurm: --chdir moves the job, SLURM_SUBMIT_DIR still names the directory sbatch
    ran in (scripts `cd $SLURM_SUBMIT_DIR` to find their inputs), also when sbatch runs
    inside a job whose own SLURM_SUBMIT_DIR it inherits."""
    inherited = {"PATH": "/bin", "SLURM_SUBMIT_DIR": "/parent", "SLURM_SUBMIT_HOST": "old"}
    job = parse_sbatch(
        ["-D", "/scratch/run", "--export=NONE"],
        environ=inherited,
        cwd="/home/a/project",
        read_stdin=lambda: SCRIPT,
        now=NOW,
        hostname="login1",
    ).job
    assert job.workdir == "/scratch/run"
    assert job.environment["SLURM_SUBMIT_DIR"] == "/home/a/project"
    assert job.environment["HAL_SUBMIT_DIR"] == "/home/a/project"
    assert job.environment["SLURM_SUBMIT_HOST"] == job.submit_host == "login1"


def test_the_submitters_umask_travels_as_slurm_umask() -> None:
    """As Slurm's sbatch: the job's environment carries the submitter's umask as
    SLURM_UMASK (4 octal digits), --export=NONE too, and the node applies it; a
    SLURM_UMASK already in the submitter's environment is sent as it is."""

    def sent(*argv: str, environ: dict[str, str]) -> str | None:
        request = parse_sbatch(
            list(argv), environ=environ, cwd="/w", read_stdin=lambda: SCRIPT, now=NOW, umask=0o27
        )
        return request.job.environment.get("SLURM_UMASK")

    assert sent(environ={"PATH": "/bin"}) == "0027"
    assert sent("--export=NONE", environ={"PATH": "/bin"}) == "0027"
    assert sent(environ={"SLURM_UMASK": "0077"}) == "0077"
    assert "SLURM_UMASK" not in parse("--wrap", "true").job.environment  # none given


def test_wrap_builds_sh_script_named_wrap() -> None:
    job = parse("--wrap", "echo $HOME && exit 7").job
    assert job.script == (
        "#!/bin/sh\n# This script was created by sbatch --wrap.\n\necho $HOME && exit 7\n"
    )
    assert job.name == "wrap"


def test_wrap_refuses_script_arguments() -> None:
    with pytest.raises(InvalidRequest, match="Script arguments not permitted with --wrap"):
        parse("--wrap=true", "job.sh")


def test_script_from_file_names_the_job(tmp_path: Path) -> None:
    (tmp_path / "train.sh").write_text("#!/bin/sh\n#SBATCH -J fromfile\ntrue\n")
    job = parse("train.sh", cwd=str(tmp_path)).job
    assert job.name == "fromfile"
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\ntrue\n")
    assert parse(str(plain)).job.name == "plain.sh"


def test_missing_script_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match=r"Unable to open file nope\.sh"):
        parse("nope.sh", cwd=str(tmp_path))


def test_a_script_file_is_sent_byte_for_byte(tmp_path: Path) -> None:
    """Slurm 22.05.8 refuses a file with DOS line breaks and keeps a carriage return
    inside a line (`echo "a<CR>b"` printed it); HAL read files as text with newline
    translation, so it did neither. A file that is not UTF-8 is refused saying how to
    convert it (Slurm sends bytes; HAL carries scripts as UTF-8 text)."""
    (tmp_path / "cr.sh").write_bytes(b'#!/bin/sh\necho "a\rb"\n')
    assert parse("cr.sh", cwd=str(tmp_path)).job.script == '#!/bin/sh\necho "a\rb"\n'
    (tmp_path / "dos.sh").write_bytes(b"#!/bin/sh\r\necho\r\n")
    with pytest.raises(InvalidRequest, match="DOS line breaks"):
        parse("dos.sh", cwd=str(tmp_path))
    (tmp_path / "latin1.sh").write_bytes(b"#!/bin/sh\n# caf\xe9\ntrue\n")
    with pytest.raises(InvalidRequest, match=r"not UTF-8 text \(byte 0xe9 at offset 15\).*iconv"):
        parse("latin1.sh", cwd=str(tmp_path))


def test_words_after_the_script_are_its_arguments(tmp_path: Path) -> None:
    """``sbatch job.sh in.dat 'two words'``: Slurm passes them to the script as $1, $2
    and shows ``Command=`` with the script's full path and them."""
    (tmp_path / "s.sh").write_text(SCRIPT)
    job = parse("-J", "x", "s.sh", "in.dat", "two words", "", cwd=str(tmp_path)).job
    assert job.script_args == ["in.dat", "two words", ""]
    assert job.script_path == str(tmp_path / "s.sh")
    assert job.name == "x"


def test_options_after_the_script_belong_to_it(tmp_path: Path) -> None:
    """sbatch stops at the script name: `-N 2 --foo` after it are script arguments, not
    options (an unknown one is no error), and `:` there starts no het component."""
    (tmp_path / "s.sh").write_text(SCRIPT)
    req = parse("-c", "2", "s.sh", "-N", "2", "--foo", ":", "--", "-p", cwd=str(tmp_path))
    assert req.job.script_args == ["-N", "2", "--foo", ":", "--", "-p"]
    assert (req.job.nodes_min, req.job.cpus_per_task, req.components) == (1, 2, ())


def test_the_script_path_is_normalised_and_has_no_arguments_by_default(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "s.sh").write_text(SCRIPT)
    job = parse("./d/../d/s.sh", cwd=str(tmp_path)).job
    assert (job.script_path, job.script_args) == (str(tmp_path / "d" / "s.sh"), [])


def test_a_script_from_stdin_or_wrap_has_no_path_and_no_arguments() -> None:
    for job in (parse().job, parse("--wrap", "true").job):
        assert (job.script_path, job.script_args) == (None, [])


def test_too_many_script_arguments_are_refused_by_the_schema(tmp_path: Path) -> None:
    """sbatch sends the job as JSON without importing its schema (its start-up is a
    workflow tool's cost per job); the schema's limit, which the server applies, refuses
    the arguments past 4096."""
    (tmp_path / "s.sh").write_text(SCRIPT)
    req = parse("s.sh", *["a"] * 4097, cwd=str(tmp_path))
    assert req.body["script_args"] == ["a"] * 4097
    with pytest.raises(InvalidRequest, match="script_args has more than 4096 entries"):
        _ = req.job
    with pytest.raises(InvalidRequest, match="script_args has more than 4096 entries"):
        parse("--test-only", "s.sh", *["a"] * 4097, cwd=str(tmp_path))  # (builds one anyway)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("", "Batch script is empty!"),
        ("  \n\n", "only whitespace"),
        ("echo hi\n", "This does not look like a batch script"),
        ("#!/bin/sh\r\necho\r\n", "DOS line breaks"),
    ],
)
def test_bad_scripts(script: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse(script=script)


DIRECTIVES = """#!/bin/bash
# a comment
#SBATCH --job-name=train
#SBATCH -N 2 --ntasks-per-node=4  # trailing comment
#SBATCH --comment="two words"

#SBATCH -t 10
# SBATCH --mem=1G   (commented out: not a directive)
##SBATCH --qos=x
echo start
#SBATCH --partition=ignored-after-first-command
"""


def test_directives_until_first_command() -> None:
    job = parse(script=DIRECTIVES).job
    assert job.name == "train"
    assert job.nodes_min == 2
    assert job.ntasks_per_node == 4
    assert job.comment == "two words"
    assert job.time_limit_seconds == 600
    assert job.memory_per_node_bytes is None
    assert job.qos is None
    assert job.partition is None


def test_cli_overrides_directives() -> None:
    job = parse("-J", "cli", "-t", "5", script=DIRECTIVES).job
    assert job.name == "cli"
    assert job.time_limit_seconds == 300
    assert job.nodes_min == 2  # untouched directives still apply


def test_environment_beats_directives_and_cli_beats_environment() -> None:
    env = {"SBATCH_PARTITION": "envp", "SBATCH_TIMELIMIT": "7"}
    script = "#!/bin/sh\n#SBATCH -p scriptp\n#SBATCH -t 1\ntrue\n"
    job = parse_sbatch(["-t", "9"], environ=env, cwd="/", read_stdin=lambda: script, now=NOW).job
    assert job.partition == "envp"
    assert job.time_limit_seconds == 540


def test_more_input_variables_as_slurm_reads_them() -> None:
    """Slurm 22.05.8: SBATCH_WAIT blocks and returns the job's exit code,
    SBATCH_OUTPUT/ERROR name the files, SBATCH_ARRAY_INX makes an array,
    SBATCH_EXCLUSIVE=exclusive and SBATCH_NO_REQUEUE=1 act; HAL ignored all of them."""
    env = {
        "SBATCH_WAIT": "1",
        "SBATCH_OUTPUT": "env_%j.out",
        "SBATCH_ERROR": "e_%j.err",
        "SBATCH_ARRAY_INX": "1-3",
        "SBATCH_EXCLUSIVE": "exclusive",
        "SBATCH_NO_REQUEUE": "1",
        "SBATCH_OPEN_MODE": "append",
        "SBATCH_GPUS_PER_NODE": "2",
        "SBATCH_WCKEY": "w",
    }
    request = parse(environ=env)
    job = request.job
    assert request.wait
    assert (job.stdout, job.stderr) == ("env_%j.out", "e_%j.err")
    assert job.array == "1-3"
    assert job.exclusive and job.requeue is False
    assert (job.open_mode, job.gpus_per_node, job.wckey) == ("append", 2, "w")
    # the command line wins, as for the other variables
    cli = parse("--requeue", "-o", "cli.out", environ=env).job
    assert cli.requeue is True and cli.stdout == "cli.out"


def test_input_variables_of_options_hal_lacks_are_named() -> None:
    env = {"SBATCH_CPUS_PER_GPU": "2", "SBATCH_DEBUG": "1", "SBATCH_WAIT": "1", "X": "1"}
    assert ignored_variables(env) == ["SBATCH_CPUS_PER_GPU"]
    assert ignored_variables({"SBATCH_HINT": "nomultithread", "SBATCH_GET_USER_ENV": "1"}) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--get-user-env"],
        ["--get-user-env=10L"],
        ["--hint=nomultithread"],
        ["--ntasks-per-core=1", "--threads-per-core=1"],
        ["--cpu-freq=high", "--mem-bind=local", "--gpu-bind=closest", "--acctg-freq=30"],
        ["--profile=task", "--propagate", "-s", "--spread-job", "--use-min-nodes"],
        ["--dependency="],  # (a pipeline's first step: DEPS is empty)
        ["-d", ""],
        ["--constraint="],
    ],
)
def test_options_slurm_takes_where_they_do_not_apply_are_taken(argv: list[str]) -> None:
    """A Slurm site's script runs unchanged: hints about threads, binding, frequencies
    and profiling, and an empty dependency or constraint, change nothing."""
    fields = job_fields(*argv)
    assert set(fields) == {"script", "environment", "workdir"}


def test_distribution_reaches_the_jobs_sruns() -> None:
    env = parse("-m", "cyclic").job.environment
    assert env["SLURM_DISTRIBUTION"] == "cyclic"
    env = parse(environ={"SBATCH_DISTRIBUTION": "block", "PATH": "/bin"}).job.environment
    assert env["SLURM_DISTRIBUTION"] == "block"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--hint=nomultitread"], "'nomultitread' is not a hint"),
        (["--threads-per-core=0"], "--threads-per-core needs a positive integer"),
        (["-m", "sideways"], "distribution"),
    ],
)
def test_their_values_are_still_checked(argv: list[str], said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        parse(*argv)


def test_directive_values_are_literal() -> None:
    """Slurm reads directives itself: no shell expansion of $VARS."""
    job = parse(script="#!/bin/sh\n#SBATCH -o $HOME/%j.out\ntrue\n").job
    assert job.stdout == "$HOME/%j.out"


def test_directive_lines_and_words() -> None:
    assert directive_lines("#!/bin/sh\n#SBATCH -N 1\n\n#SBATCH\ntrue\n#SBATCH -n 2\n") == [
        (2, " -N 1"),
        (4, ""),
    ]
    assert split_directive(" -J 'a b' --comment=x # note") == ["-J", "a b", "--comment=x"]
    assert split_directive(r' -o "a\ b" "-e" c') == ["-o", "a b", "-e", "c"]
    with pytest.raises(InvalidRequest, match="unbalanced quote"):
        split_directive(' -J "oops')


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (r"--comment=a\ b", ["--comment=a", "b"]),
        ('--comment="a b"', ["--comment=a b"]),
        ("--comment='a b'", ["--comment=a b"]),
        ('--comment=a" "b', ["--comment=a b"]),
        (r'--comment="a\ b"', ["--comment=a b"]),
        (r'--comment="a\"b"', ['--comment=a"b']),
        (r"--comment=a\"b", ['--comment=a"b']),
        ("--comment='a\"b'", ['--comment=a"b']),
        (r"--comment=a\\b", [r"--comment=a\b"]),
        ("--comment=a\\", ["--comment=a"]),
        ("--comment=a#b", ["--comment=a"]),
        ("-J x#y --comment=zz", ["-J", "x"]),
        ('--comment="a#b"', ["--comment=a#b"]),
        (r"--comment=a\#b", ["--comment=a#b"]),
        ('--comment="a  b" # c d', ["--comment=a  b"]),
        ('--comment ""', ["--comment", ""]),
    ],
)
def test_directive_words_split_as_slurm_splits_them(text: str, words: list[str]) -> None:
    """Each case as Slurm 22.05.8's sbatch took it (scontrol show job's Comment/JobName).
    HAL took ``a\\ b`` as one word, kept ``x#y`` whole, and read no backslash in quotes."""
    assert split_directive(" " + text) == words


def test_a_backslash_space_does_not_join_words() -> None:
    """Slurm 22.05.8: ``#SBATCH -H --comment=a\\ b`` fails with "Invalid directive found in
    batch script: b"; HAL submitted the comment "a b"."""
    script = "#!/bin/sh\n#SBATCH -H --comment=a\\ b\ntrue\n"
    with pytest.raises(UnsupportedOption, match=r"^Invalid directive found in batch script: b "):
        parse(script=script)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("#SBATCH-J nospace", "nospace"),
        ("#SBATCH--job-name=x2", "x2"),
        ("#SBATCH-Jx3", "x3"),
        ("#SBATCH\t-J tab", "tab"),
        ("#sbatch -J lower", "sbatch"),  # not a directive: the prefix is upper case
        (" #SBATCH -J lead", "sbatch"),  # nor one that does not start the line
        ("#HALT -J halt", "sbatch"),  # #HAL needs a space after it
    ],
)
def test_a_directive_needs_no_space_after_sbatch(line: str, name: str) -> None:
    """Slurm 22.05.8 applies ``#SBATCH-J nospace`` (JobName=nospace); HAL ignored it."""
    assert parse(script=f"#!/bin/sh\n{line}\ntrue\n").job.name == name


def test_a_word_stuck_to_sbatch_is_refused() -> None:
    """Slurm 22.05.8: ``#SBATCHX -J x`` is "Invalid directive found in batch script: X"."""
    with pytest.raises(UnsupportedOption, match=r"^Invalid directive found in batch script: X "):
        parse(script="#!/bin/sh\n#SBATCHX -J x\ntrue\n")


@pytest.mark.parametrize(
    ("argv", "script", "message"),
    [
        (["--tmp=x"], SCRIPT, "unrecognized option '--tmp'"),
        (["-j"], SCRIPT, "invalid option -- 'j'"),
        (["--exclusive=mcs"], SCRIPT, "MCS"),
        ([], "#!/bin/sh\n#SBATCH --tmp=x\ntrue\n", "script line 2"),
        ([], "#!/bin/sh\n#SBATCH stray\ntrue\n", "reads only options"),
    ],
)
def test_unsupported_options_are_errors(argv: list[str], script: str, message: str) -> None:
    with pytest.raises(UnsupportedOption) as err:
        parse(*argv, script=script)
    assert message in err.value.message
    assert "HAL" in err.value.message


@pytest.mark.parametrize(
    ("argv", "script", "message"),
    [
        (["--mem=1G", "--mem-per-cpu=1G"], SCRIPT, "mutually exclusive"),
        ([], "#!/bin/sh\n#SBATCH --mem=1G\n#SBATCH --mem-per-gpu=1G\ntrue\n", "mutually exclusive"),
        (["--gres=gpu:1", "--gpus-per-node=2"], SCRIPT, "mutually exclusive"),
        (["--gres=gpu:a100:1", "--gpus=h100:2"], SCRIPT, "GPU types disagree"),
        (["-c", "0"], SCRIPT, "positive integer"),
        (["-n", "x"], SCRIPT, "positive integer"),
        (["--mem=1G", "--mem-per-cpu=0"], SCRIPT, "mutually exclusive"),
        (["--kill-on-invalid-dep=maybe"], SCRIPT, "yes or no"),
        (["-C", "a|b"], SCRIPT, "all be present"),
        (["--exclusive=users"], SCRIPT, "^Invalid --exclusive specification"),
        (["-a", "5-1"], SCRIPT, "ranges go up"),
        (["-d", "afterok:1_x"], SCRIPT, "array index"),
        (["--signal=NOPE"], SCRIPT, "^Invalid --signal specification"),
        (["--nice=x"], SCRIPT, "integer"),
        (["-p", ","], SCRIPT, "partition name"),
    ],
)
def test_invalid_values(argv: list[str], script: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse(*argv, script=script)


def test_cli_memory_option_resets_script_one() -> None:
    """Slurm's rule: a --mem-per-cpu on the command line replaces a script's --mem."""
    script = "#!/bin/sh\n#SBATCH --mem=4G\ntrue\n"
    job = parse("--mem-per-cpu=1G", script=script).job
    assert job.memory_per_node_bytes is None
    assert job.memory_per_cpu_bytes == 1 << 30


@pytest.mark.parametrize(
    ("argv", "script", "environ"),
    [
        (["--mem-per-cpu=0"], SCRIPT, {}),
        (["--mem-per-cpu", "0K", "-n2"], SCRIPT, {}),
        ([], "#!/bin/sh\n#SBATCH --mem-per-cpu=0\ntrue\n", {}),
        ([], SCRIPT, {"SBATCH_MEM_PER_CPU": "0"}),
        # the same of --mem-per-gpu=0 (Slurm: TRES mem=<the node's>; HAL refused it)
        (["--mem-per-gpu=0", "--gpus=1"], SCRIPT, {}),
        ([], SCRIPT, {"SBATCH_MEM_PER_GPU": "0"}),
    ],
)
def test_mem_per_cpu_zero_is_all_of_the_nodes_memory(
    argv: list[str], script: str, environ: dict[str, str]
) -> None:
    """Slurm 22.05.8 takes ``--mem-per-cpu=0`` as ``--mem=0``: ``MinMemoryNode=0``, no
    MinMemoryCPU, ``TRES=...,mem=<the node's>`` and the job runs holding all of it
    (HAL refused it)."""
    job = parse(*argv, script=script, environ={"PATH": "/bin", **environ}).job
    assert job.memory_per_node_bytes == 0
    assert job.memory_per_cpu_bytes is None and job.memory_per_gpu_bytes is None


@pytest.mark.parametrize(
    ("argv", "field", "size"),
    [
        (["--mem=100K"], "memory_per_node_bytes", 1 << 20),
        (["--mem=500K"], "memory_per_node_bytes", 1 << 20),
        (["--mem=1025K"], "memory_per_node_bytes", 2 << 20),
        (["--mem=0K"], "memory_per_node_bytes", 0),  # all the node's memory, as --mem=0
        (["--mem-per-cpu=100K"], "memory_per_cpu_bytes", 1 << 20),
        (["--mem-per-gpu=100K"], "memory_per_gpu_bytes", 1 << 20),
    ],
)
def test_memory_in_kib_is_whole_mib(argv: list[str], field: str, size: int) -> None:
    """Slurm 22.05.8: ``sbatch --mem=100K`` gives ``MinMemoryNode=1M`` (sacct ReqMem 1M),
    ``--mem-per-cpu=100K`` ``MinMemoryCPU=1M``. HAL sent 102400 bytes, 0 MiB to the
    server: the same as ``--mem=0``, every byte of the node."""
    assert getattr(parse(*argv).job, field) == size


@pytest.mark.parametrize(
    ("argv", "script", "nodes", "warning"),
    [
        (["-N", "2", "-n", "1"], SCRIPT, (1, 1), (1, 2)),
        (["-N", "3", "-n", "2"], SCRIPT, (2, 2), (2, 3)),
        (["-N", "2-4", "-n", "1"], SCRIPT, (1, 1), (1, 2)),
        (["-N", "4", "-n", "2", "-c", "2"], SCRIPT, (2, 2), (2, 4)),
        (["-N", "2", "-n", "1", "--ntasks-per-node=1"], SCRIPT, (1, 1), (1, 2)),
        (["-n", "1"], "#!/bin/sh\n#SBATCH -N 2\ntrue\n", (1, 1), (1, 2)),
        (["-N", "1-4", "-n", "2"], SCRIPT, (1, 2), None),  # the maximum only: no warning
        (["-N", "2-4", "-n", "3"], SCRIPT, (2, 3), None),
        (["-N", "2", "-n", "2"], SCRIPT, (2, 2), None),
        (["-N", "2", "-n", "8"], SCRIPT, (2, 2), None),
    ],
)
def test_no_more_nodes_than_tasks(
    argv: list[str], script: str, nodes: tuple[int, int], warning: tuple[int, int] | None
) -> None:
    """Slurm 22.05.8: ``sbatch -N 2 -n 1`` prints "sbatch: Warning: can't run 1 processes on
    2 nodes, setting nnodes to 1" and the job has NumNodes=1; ``-N 3 -n 2`` gets 2 nodes,
    ``-N 2-4 -n 1`` NumNodes=1-1, ``-N 1-4 -n 2`` 1-2 without a word. HAL allocated 2.
    (``warning``: the tasks and the nodes the warning names.)"""
    request = parse(*argv, script=script)
    assert (request.job.nodes_min, request.job.nodes_max) == nodes
    expected: tuple[str, ...] = ()
    if warning:
        tasks, on = warning
        expected = (
            f"Warning: can't run {tasks} processes on {on} nodes, setting nnodes to {tasks}",
        )
    assert request.warnings == expected


def test_cli_gpus_per_node_resets_script_gres() -> None:
    job = parse("--gpus-per-node=3", script="#!/bin/sh\n#SBATCH --gres=gpu:1\ntrue\n").job
    assert job.gpus_per_node == 3


def test_requeue_last_one_wins_across_levels() -> None:
    script = "#!/bin/sh\n#SBATCH --no-requeue\ntrue\n"
    assert parse(script=script).job.requeue is False
    assert parse("--requeue", script=script).job.requeue is True


def test_nodelist_from_file(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("n1\nn[2-3]\n")
    assert parse("-w", str(hosts)).job.nodelist == ["n1", "n2", "n3"]


ENV = {"PATH": "/bin", "HOME": "/h", "SLURM_CONF": "/c", "A": "1"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("ALL", ENV),
        ("NONE", {"SLURM_CONF": "/c"}),
        ("A", {"SLURM_CONF": "/c", "A": "1"}),
        ("B=2,A", {"SLURM_CONF": "/c", "B": "2", "A": "1"}),
        ("ALL,B=2", {**ENV, "B": "2"}),
        ("NONE,B=2", {"SLURM_CONF": "/c", "B": "2"}),  # (was refused; Slurm 22.05.8 runs it)
        ("B=x,/y,C=3", {"SLURM_CONF": "/c", "B": "x,/y", "C": "3"}),
        ("MISSING", {"SLURM_CONF": "/c"}),
    ],
)
def test_export(spec: str, expected: dict[str, str]) -> None:
    assert export_environment(spec, ENV) == expected


def test_export_option_applies() -> None:
    job = parse("--export=NONE", environ={"PATH": "/bin", "SLURM_X": "1"}).job
    assert job.environment == {
        "SLURM_X": "1",
        "SLURM_SUBMIT_DIR": "/work",
        "HAL_SUBMIT_DIR": "/work",
        "SLURM_EXPORT_ENV": "NONE",  # srun's default in the job, as Slurm's sbatch sets it
    }


def test_export_env_is_set_only_where_export_was_given() -> None:
    """Slurm 22.05.8: no SLURM_EXPORT_ENV without --export; SBATCH_EXPORT
    counts as --export."""
    assert "SLURM_EXPORT_ENV" not in parse(environ={"PATH": "/bin"}).job.environment
    given = parse(environ={"PATH": "/bin", "SBATCH_EXPORT": "ALL,A=1"}).job.environment
    assert given["SLURM_EXPORT_ENV"] == "ALL,A=1"
    assert given["A"] == "1"


def test_help_and_version_need_no_script() -> None:
    assert parse("--help").help
    assert parse("-V").version


def test_signal_value_is_checked_and_kept() -> None:
    assert parse("--signal", "USR1@90").job.signal == "USR1@90"
    assert signal.SIGUSR1  # the name resolves on this platform
