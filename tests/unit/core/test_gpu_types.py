"""GPU types as users write them against the models agents report (NVML's names)."""

from __future__ import annotations

import pytest

from hal.core.node import gpu_type_matches, gpu_type_name

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def test_the_type_shown_is_slurms_autodetected_name() -> None:
    assert gpu_type_name(H100) == "nvidia_h100_80gb_hbm3"
    assert gpu_type_name(A100) == "nvidia_a100-sxm4-80gb"
    assert gpu_type_name("a100") == "a100"


@pytest.mark.parametrize(
    ("wanted", "model"),
    [
        ("h100", H100),
        ("H100", H100),
        ("nvidia_h100_80gb_hbm3", H100),  # what sinfo shows, pasted back
        ("h100_80gb", H100),
        ("a100", A100),
        ("a100-sxm4", A100),
        ("nvidia_a100-sxm4-80gb", A100),
        ("a100", "a100"),  # an operator's short model
    ],
)
def test_a_type_is_any_run_of_the_models_words(wanted: str, model: str) -> None:
    assert gpu_type_matches(wanted, model)


@pytest.mark.parametrize(
    ("wanted", "model"),
    [
        ("a100", H100),
        ("100", H100),  # part of a word
        ("h10", H100),
        ("80gb_h100", H100),  # words out of order
        ("h100", ""),  # a node without a model has no type
    ],
)
def test_anything_else_is_another_type(wanted: str, model: str) -> None:
    assert not gpu_type_matches(wanted, model)
