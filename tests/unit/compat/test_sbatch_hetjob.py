"""``sbatch`` heterogeneous jobs: ``:`` between command-line components and
``#SBATCH hetjob`` between script components, each with its own options."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.compat.sbatch import SbatchRequest, parse_sbatch
from hal.core.errors import InvalidRequest

NOW = 1_800_000_000.0
SCRIPT = "#!/bin/bash\necho hi\n"


def parse(*argv: str, script: str = SCRIPT, cwd: str = "/work") -> SbatchRequest:
    return parse_sbatch(
        list(argv), environ={"PATH": "/bin"}, cwd=cwd, read_stdin=lambda: script, now=NOW
    )


def test_command_line_components_have_their_own_options(tmp_path: Path) -> None:
    """``sbatch -p cpu -N1 -c4 : -p gpu -N2 --gpus-per-node=2 --mem=8G job.sh``."""
    (tmp_path / "job.sh").write_text(SCRIPT)
    argv = ["-p", "cpu", "-N1", "-c4", ":", "-p", "gpu", "-N2", "--gpus-per-node=2"]
    req = parse(*argv, "--mem=8G", "-C", "a100", "job.sh", cwd=str(tmp_path))
    first, second = req.components
    assert req.body is req.bodies[0] and req.job == first
    assert (first.partition, first.nodes_min, first.cpus_per_task) == ("cpu", 1, 4)
    assert (second.partition, second.nodes_min, second.gpus_per_node) == ("gpu", 2, 2)
    assert second.memory_per_node_bytes == 8 * 2**30 and first.memory_per_node_bytes is None
    assert second.constraint == ["a100"] and not first.constraint
    assert first.name == second.name == "job.sh"


def test_script_hetjob_directives_split_components() -> None:
    script = (
        "#!/bin/bash\n#SBATCH -J mixed -t 10 -n 1 -c 2\n#SBATCH hetjob\n"
        "#SBATCH -n 4 -N 2 --mem=1G -t 99\n#SBATCH packjob\n#SBATCH -n 1\necho hi\n"
    )
    req = parse(script=script)
    assert len(req.components) == 3
    a, b, c = req.components
    assert (a.ntasks, a.cpus_per_task, b.ntasks, b.nodes_min, c.ntasks) == (1, 2, 4, 2, 1)
    # job-wide options come from component 0: its name and time limit for all
    assert a.name == b.name == c.name == "mixed"
    assert a.time_limit_seconds == b.time_limit_seconds == c.time_limit_seconds == 600


def test_command_line_overrides_the_same_script_component() -> None:
    script = "#!/bin/bash\n#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -n 2\necho hi\n"
    req = parse("-n", "3", script=script)
    assert [c.ntasks for c in req.components] == [3, 2]


def test_ordinary_job_has_no_components() -> None:
    assert parse("-n", "2").components == ()


def test_array_het_job_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="job array"):
        parse("--array=1-2", ":", "-n", "2")


def test_the_script_arguments_follow_the_last_component(tmp_path: Path) -> None:
    """``sbatch -c1 : -c2 job.sh a b``: the script runs once, with the submission's
    arguments, whichever component is sent first."""
    (tmp_path / "job.sh").write_text(SCRIPT)
    req = parse("-c1", ":", "-c2", "job.sh", "a", "-c3", cwd=str(tmp_path))
    assert [c.script_args for c in req.components] == [["a", "-c3"], ["a", "-c3"]]
    assert [c.cpus_per_task for c in req.components] == [1, 2]
