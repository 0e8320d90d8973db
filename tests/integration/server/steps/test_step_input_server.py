"""srun's own stdin relayed to a step's tasks on other nodes, on a real server with two
real agents (ADR 0012, "srun's input"), as Slurm's srun forwards it: to every task by
default, to task N alone with ``-i N``, its EOF closing theirs. Before, such tasks read
/dev/null and ``-i N`` was refused, so ``cat data | srun -N2 ./filter`` filtered nothing."""

from __future__ import annotations

from pathlib import Path

from test_srun_options_server import run
from two_agents import (
    SRUN,
)

from hal.testing.live import LiveServer


def test_every_task_reads_sruns_input(server: LiveServer, tmp_path: Path) -> None:
    """``printf 'a\\nb\\n' | srun -N2 -n2 -l cat``: both tasks, one on each node, read both
    lines and end at srun's EOF."""
    body = f"printf 'a\\nb\\n' | {SRUN} -N2 -n2 -l cat; echo rc=$?\n"
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    assert sorted(out.splitlines()) == ["0: a", "0: b", "1: a", "1: b", "rc=0"], (out, err)


def test_one_rank_reads_it_the_others_end_at_once(server: LiveServer, tmp_path: Path) -> None:
    """``-i 1``: rank 1 (on the second node) reads srun's input, rank 0 its EOF at once
    (its ``cat`` ends while srun's input is still open)."""
    body = (
        f"(echo given; sleep 2; echo later) | {SRUN} -N2 -n2 -l -i 1 "
        "sh -c 'cat; echo \"done $(date +%s)\"'\n"
        "echo end $(date +%s)\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    lines = out.splitlines()
    assert sorted(x for x in lines if not x.split(": ")[-1].startswith(("done", "end"))) == [
        "1: given",
        "1: later",
    ], (out, err)
    done = {x.split(": ")[0]: int(x.rsplit(" ", 1)[1]) for x in lines if "done" in x}
    assert done["1"] - done["0"] >= 1, (out, err)  # rank 0 did not wait for srun's input


def test_a_large_input_arrives_whole(server: LiveServer, tmp_path: Path) -> None:
    """20 MiB, more than the server holds of a step's input (4 MiB), through ``wc -c`` on
    each node: srun waits while the buffer is full, nothing is lost or repeated."""
    body = f"head -c 20971520 /dev/urandom | {SRUN} -N2 -n2 -l wc -c\n"
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    assert sorted(out.split()) == ["0:", "1:", "20971520", "20971520"], (out, err)


def test_nothing_hangs_on_a_task_that_reads_nothing(server: LiveServer, tmp_path: Path) -> None:
    """Tasks that end without reading an endless input: the step ends, srun with it (the
    writer gets SIGPIPE); and srun's SIGTERM ends a step whose tasks wait for input."""
    body = (
        f"yes | {SRUN} -N2 -n2 true; echo rc=$?\n"
        # (a writer that ends once srun has: sh's wait waits for the whole pipeline)
        f"while :; do echo x; sleep 1; done | {SRUN} -N2 -n2 cat >/dev/null & pid=$!\n"
        "sleep 3\nkill -TERM $pid\nwait $pid\necho term=$?\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n2")
    assert out.splitlines() == ["rc=0", "term=143"], (out, err)
