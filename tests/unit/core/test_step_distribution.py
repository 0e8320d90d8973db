"""srun's -m/--distribution (``hal.slurm.distribution``, ``step_layout``): which ranks each
node of a step runs, and what SLURM_DISTRIBUTION reads, as Slurm 22.05.8's srun."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.slurm.distribution import Distribution, deal, parse_distribution
from hal.slurm.steps import StepRequest, step_layout

NODES = ("n1", "n2", "n3")


def ranks_of(request: StepRequest, job_ntasks: int = 1) -> list[list[int]]:
    layout = step_layout(request, 7, NODES, job_ntasks)
    return [list(layout.ranks(i)) for i in range(len(layout.nodes))]


@pytest.mark.parametrize(
    ("spec", "ntasks", "nodes", "ranks"),
    [
        ("block", 5, 2, [[0, 1, 2], [3, 4]]),
        ("cyclic", 5, 2, [[0, 2, 4], [1, 3]]),
        ("cyclic", 4, 3, [[0, 3], [1], [2]]),
        ("cyclic:block", 3, 3, [[0], [1], [2]]),  # the socket part moves nothing
        ("plane=2", 6, 2, [[0, 1, 4, 5], [2, 3]]),
        ("plane=2", 5, 3, [[0, 1], [2, 3], [4]]),
        ("plane=4", 3, 2, [[0, 1, 2]]),  # one plane: the other node runs nothing
    ],
)
def test_ranks_follow_the_distribution(
    spec: str, ntasks: int, nodes: int, ranks: list[list[int]]
) -> None:
    """`srun -N NODES -n NTASKS -m SPEC`: the ranks each node runs (SLURM_PROCID there,
    in SLURM_LOCALID order)."""
    request = StepRequest(nodes=nodes, ntasks=ntasks, distribution=parse_distribution(spec))
    assert ranks_of(request) == ranks


def test_cyclic_keeps_blocks_counts_and_the_cpu_check() -> None:
    """Cyclic moves ranks, not counts: -N2 -n3 puts two tasks on n1 either way, so a node
    of one CPU refuses it as block would."""
    request = StepRequest(nodes=2, ntasks=3, distribution=parse_distribution("cyclic"))
    layout = step_layout(request, 7, NODES, 1)
    assert layout.tasks == (2, 1) and layout.tasks_per_node() == "2,1"
    with pytest.raises(InvalidRequest, match="More processors requested than permitted"):
        step_layout(request, 7, NODES, 1, cpus_per_node=(1, 1, 1))


def test_plane_respects_ntasks_per_node() -> None:
    request = StepRequest(ntasks=5, ntasks_per_node=2, distribution=parse_distribution("plane=3"))
    assert ranks_of(request) == [[0, 1], [2, 3], [4]]  # no node past two


def test_arbitrary_places_rank_i_on_the_i_th_name() -> None:
    """-m arbitrary -w n2,n1,n2: rank 0 and 2 on n2, rank 1 on n1; nodes stay in the
    job's order, and n2's local ids follow its ranks."""
    request = StepRequest(nodelist=("n2", "n1", "n2"), distribution=parse_distribution("arbitrary"))
    layout = step_layout(request, 7, NODES, 1)
    assert layout.nodes == ("n1", "n2")
    assert [list(layout.ranks(i)) for i in range(2)] == [[1], [0, 2]]
    assert layout.distribution == "arbitrary"


def test_arbitrary_refusals() -> None:
    arbitrary = parse_distribution("arbitrary")
    with pytest.raises(InvalidRequest, match="You asked for 2 tasks but hostlist specified 3"):
        step_layout(
            StepRequest(ntasks=2, nodelist=("n1",) * 3, distribution=arbitrary), 7, NODES, 1
        )
    with pytest.raises(InvalidRequest, match="with -w"):
        step_layout(StepRequest(distribution=arbitrary), 7, NODES, 1)
    with pytest.raises(InvalidRequest, match="node n9 is not in the job's allocation"):
        step_layout(StepRequest(nodelist=("n9",), distribution=arbitrary), 7, NODES, 1)


@pytest.mark.parametrize(
    ("spec", "ntasks", "nnodes", "variable"),
    [
        ("", 1, 1, "cyclic"),  # checked: srun -n1 on one node
        ("", 4, 1, "block"),  # checked: srun -n4 on one node
        ("*", 2, 1, "block"),
        ("cyclic:*", 2, 1, "cyclic:cyclic"),
        ("block,Pack", 2, 1, "block,pack"),
        ("block:block", 2, 1, "block:block"),
        ("plane=2", 4, 1, "plane"),
        ("Cyclic", 4, 1, "cyclic"),
    ],
)
def test_the_variable_reads_as_slurm_s(spec: str, ntasks: int, nnodes: int, variable: str) -> None:
    assert parse_distribution(spec).variable(ntasks, nnodes) == variable


@pytest.mark.parametrize("spec", ["bogus", "plane", "plane=0", "plane=x", "block:nope", "block,x"])
def test_a_bad_spec_is_refused_with_srun_s_line(spec: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_distribution(spec)
    assert err.value.message.splitlines()[-1] == "Invalid --distribution specification"
    if spec.startswith("plane"):
        assert err.value.message.startswith("Invalid plane size or size not specified\n")


def test_the_spec_round_trips() -> None:
    """What srun sends the server reads back the same."""
    for spec in ("block", "cyclic:cyclic", "plane=3", "arbitrary", "block,pack"):
        assert parse_distribution(parse_distribution(spec).spec) == parse_distribution(spec)
    assert Distribution().spec == ""


def test_deal_passes_over_full_nodes() -> None:
    assert deal(5, [1, 3, 1]) == [[0], [1, 3, 4], [2]]
