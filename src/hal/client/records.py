"""Answers read as plain records, for commands that start, ask once and exit.

``HalClient`` validates what the server answers with the wire models (pydantic), whose
import alone costs a short-lived command more than its request (~100 ms). With
``validate=False`` a method reads the same JSON into ``Record`` objects instead: each JSON
object becomes one, its keys its attributes, so code written against the model
(``JobInfo``) reads a record alike. The server built that JSON from the model, every field
present, and stays the authority on what is valid: a record is never sent back.
"""

from __future__ import annotations

import sys

from hal.client import cjson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import SimpleNamespace
    from typing import Any
else:  # (the ``types`` module, just for this name, is start-up time: it is this type)
    SimpleNamespace = type(sys.implementation)


class Record(SimpleNamespace):
    """One JSON object of an answer; its keys are its attributes."""


def records(body: bytes | str) -> Any:
    """The JSON ``body`` with every object a ``Record``."""
    return cjson.loads(body, object_hook=lambda fields: Record(**fields))
