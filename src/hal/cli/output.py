"""What a `hal` command prints: its answer as JSON (``--json``) or as text for people."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # (the commands start fast: pydantic comes with the answer)
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


def emit(answer: M, as_json: bool, text: Callable[[M], str]) -> int:
    """Print ``answer`` as indented JSON, or ``text(answer)`` (which ends its own lines);
    the command's exit status."""
    if as_json:
        print(answer.model_dump_json(indent=2))
    else:
        print(text(answer), end="")
    return 0
