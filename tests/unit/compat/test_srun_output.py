"""srun -o/-e: each task's output file, as Slurm 22.05.8 writes them (on the
peer: ``srun -n2 -o %j_%t_%s_%J_%N_%n.out`` in job 1 wrote ``1_0_0_1.0_vm_0.out`` and
``1_1_0_1.0_vm_0.out``, each with its task's stdout and stderr; ``-o pre.out`` shared one
file, truncated; ``-e only.err`` alone left stdout to srun's; ``-o none`` dropped it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from compat_fakes import call

from hal.compat.srun import parse_command
from hal.compat.srun_output import OutputRequest, node_of_rank, step_input
from hal.core.errors import InvalidRequest

ENV = {"SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "wrap", "SLURM_JOB_USER": "ana"}


def write_all(request: OutputRequest, tmp_path: Path, ranks: int, env: dict[str, str]) -> None:
    files = request.files(env, str(tmp_path), 0, "vm")
    for rank in range(ranks):
        for stream in ("stdout", "stderr"):
            fd = files.fd(rank, stream)
            if fd is not None:
                os.write(fd, f"{stream[3:]} {rank}\n".encode())
    files.close()


def test_each_task_its_own_file_with_the_steps_letters(tmp_path: Path) -> None:
    write_all(OutputRequest(output="%j_%t_%s_%J_%N_%n_%x_%u.out"), tmp_path, 2, ENV)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "1_0_0_1.0_vm_0_wrap_ana.out",
        "1_1_0_1.0_vm_0_wrap_ana.out",
    ]
    assert (tmp_path / "1_1_0_1.0_vm_0_wrap_ana.out").read_text() == "out 1\nerr 1\n"


def test_a_shared_file_is_truncated_once_or_appended_to(tmp_path: Path) -> None:
    (tmp_path / "pre.out").write_text("old\n")
    write_all(OutputRequest(output="pre.out"), tmp_path, 2, ENV)
    assert (tmp_path / "pre.out").read_text() == "out 0\nerr 0\nout 1\nerr 1\n"
    write_all(OutputRequest(output="pre.out"), tmp_path, 1, {**ENV, "SLURM_OPEN_MODE": "a"})
    assert (tmp_path / "pre.out").read_text().endswith("err 1\nout 0\nerr 0\n")


def test_error_alone_leaves_stdout_to_srun_and_none_drops_it(tmp_path: Path) -> None:
    files = OutputRequest(error="only.err").files(ENV, str(tmp_path), 3, "vm")
    assert files.fd(0, "stdout") is None and files.fd(0, "stderr") is not None
    files.close()
    assert (tmp_path / "only.err").exists()
    files = OutputRequest(output="none").files(ENV, str(tmp_path), 3, "vm")
    assert os.readlink(f"/proc/self/fd/{files.fd(0, 'stdout')}") == os.devnull
    files.close()


def test_a_file_that_cannot_be_opened_says_which(tmp_path: Path) -> None:
    files = OutputRequest(output="no/such/dir/%t.out").files(ENV, str(tmp_path), 0, "vm")
    with pytest.raises(InvalidRequest, match=r"Could not open stdout file .*no/such/dir/0.out"):
        files.fd(0, "stdout")


def test_options_and_open_mode() -> None:
    call_ = parse_command(["-o", "%j_%t.out", "--error=e.%t", "--open-mode=a", "true"])
    assert call_.files == OutputRequest("%j_%t.out", "e.%t", "append")
    assert parse_command(["true"]).files is None
    refused = call(None, "srun", "--open-mode=later", "true")
    assert refused.rc == 1 and "Invalid --open-mode specification" in refused.err


def test_remote_ranks_are_placed_in_block_order() -> None:
    assert [node_of_rank(["n1", "n2"], [2, 1], r) for r in range(3)] == [
        ("n1", 0),
        ("n1", 0),
        ("n2", 1),
    ]


def test_launcher_options_parse_and_those_without_effect_are_taken() -> None:
    """Options MPI launchers and scripts pass (Slurm 22.05.8 takes each in a job): -K,
    -J, -D, -i and -c act; -p -A -q -v -X -W --cpu_bind --mem_bind... have no effect on
    a step in a job and were refused ("HAL's srun does not support it")."""
    acting = ["-K", "-J", "s1", "-D", "sub", "-i", "none"]
    idle = ["-p", "x", "-A", "y", "-q", "z", "-v", "-X", "-W", "0", "--cpu_bind=none"]
    parsed = parse_command([*acting, *idle, "--mem_bind=local", "-O", "--propagate", "true"])
    assert (parsed.kill_on_bad_exit, parsed.name, parsed.chdir, parsed.input) == (
        True,
        "s1",
        "sub",
        "none",
    )
    assert parsed.step_name == "s1" and parse_command(["/bin/true"]).step_name == "true"
    assert not parse_command(["-K0", "true"]).kill_on_bad_exit
    assert parse_command(["--gpu-bind=closest", "--hint=nomultithread", "--whole", "true"])
    refused = call(None, "srun", "--bcast", "true")
    assert refused.rc == 1 and "unrecognized option '--bcast'" in refused.err


def test_step_input_of_a_step_on_other_nodes(tmp_path: Path) -> None:
    """-i of a step on other nodes: the agents open per-task patterns; srun opens a plain
    file first (Slurm's words when it cannot); ``all`` and a rank are srun's own input,
    relayed (``srun_input``), no file."""
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "j"}
    assert step_input("all", env, str(tmp_path)) == ""
    assert step_input("NONE", env, str(tmp_path)) == ""
    assert step_input("in.%t", env, str(tmp_path)) == "in.%t"  # (not opened here)
    assert step_input("%N.txt", env, str(tmp_path)) == "%N.txt"
    with pytest.raises(InvalidRequest, match=r"^Could not open stdin file: No such file"):
        step_input("in.%j", env, str(tmp_path))
    (tmp_path / "in.7").write_text("x")
    assert step_input("in.%j", env, str(tmp_path)) == "in.%j"
    assert step_input("0", env, str(tmp_path)) == ""  # (HAL refused it: not relayed)
