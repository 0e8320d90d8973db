"""NVLink islands: parsing, completion, best-fit GPU choice, and islands from NVLink
peer-status matrices in ``nvidia-smi topo -p2p n``'s format."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.core.gpu_islands import (
    complete_islands,
    islands_from_links,
    islands_text,
    largest_free_island,
    parse_gpu_islands,
    pick_gpus,
)
from hal.testing.nvlink import BRIDGED_PAIRS_4, CUBE_MESH_8, NVSWITCH_8, PCIE_ONLY_2, matrix


def islands_of(text: str) -> tuple[tuple[int, ...], ...]:
    m = matrix(text)
    return islands_from_links(len(m), lambda i, j: m[i][j] == "OK")


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        (NVSWITCH_8, ((0, 1, 2, 3, 4, 5, 6, 7),)),
        (BRIDGED_PAIRS_4, ((0, 2), (1, 3))),
        (CUBE_MESH_8, ((0, 1, 2, 3, 4, 5, 6, 7),)),
        (PCIE_ONLY_2, ((0,), (1,))),
    ],
    ids=["nvswitch", "bridged-pairs", "cube-mesh", "pcie-only"],
)
def test_islands_from_recorded_peer_status(recorded: str, expected: object) -> None:
    assert islands_of(recorded) == expected


def test_parse_ranges_and_plus_lists() -> None:
    assert parse_gpu_islands("0-3,4-7") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert parse_gpu_islands("0+2, 1+3") == ((0, 2), (1, 3))
    assert islands_text(((0, 1, 2, 3), (4, 6), (5,))) == "0-3,4+6,5"
    assert parse_gpu_islands(islands_text(((0, 2), (1, 3)))) == ((0, 2), (1, 3))


@pytest.mark.parametrize("text", ["", "a-b", "3-1", "0,,1", "-1"])
def test_bad_island_text_says_how_to_write_it(text: str) -> None:
    with pytest.raises(InvalidRequest, match=r"e\.g\. 0-3,4-7"):
        parse_gpu_islands(text)


def test_complete_adds_unlisted_gpus_as_their_own_islands() -> None:
    assert complete_islands((), 4) == ((0, 1, 2, 3),)
    assert complete_islands((), 0) == ()
    assert complete_islands(((2, 0),), 4) == ((0, 2), (1,), (3,))


def test_complete_rejects_out_of_range_and_duplicates() -> None:
    with pytest.raises(InvalidRequest, match="has 4 GPU"):
        complete_islands(((0, 1, 2, 3, 4),), 4)
    with pytest.raises(InvalidRequest, match=r"has no GPUs \(give --gpus N"):
        complete_islands(((0,),), 0)
    with pytest.raises(InvalidRequest, match="in two islands"):
        complete_islands(((0, 1), (1, 2)), 4)


def test_pick_takes_the_fullest_island_that_fits() -> None:
    islands = ((0, 1, 2, 3), (4, 5, 6, 7))
    used = 0b0000_0011  # GPUs 0 and 1 busy: island A has 2 free, B has 4
    assert pick_gpus(islands, 8, used, 2) == (2, 3)  # best fit: A, not B
    assert pick_gpus(islands, 8, used, 3) == (4, 5, 6)  # only B fits
    assert largest_free_island(islands, 8, used) == 4


def test_pick_spans_the_fewest_islands_when_none_fits() -> None:
    islands = ((0, 1), (2, 3, 4), (5,))
    used = 0b000_0001  # free: A {1}, B {2,3,4}, C {5}
    assert pick_gpus(islands, 6, used, 4) == (1, 2, 3, 4)  # B then A (C ties A: first)
    assert pick_gpus(islands, 6, used, 9) == (1, 2, 3, 4, 5)  # all there is


def test_pick_without_islands_takes_the_lowest_free() -> None:
    assert pick_gpus((), 4, 0b0101, 2) == (1, 3)
    assert pick_gpus((), 4, 0, 0) == ()
