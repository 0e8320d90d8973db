"""Schemathesis hooks for the fuzzing run over HAL's REST API (test_fuzz_api.py).

Loaded by the schemathesis CLI (``SCHEMATHESIS_HOOKS``), not by pytest. Each hook keeps one
operation testable in a bounded run without excluding it; what each changes and why:

- ``POST /v1/agent/{node}/sync`` and ``/output`` are the agents' long polls: they answer
  after up to ``wait_seconds`` (0-60; default 10 and 20). A missing wait or one in that
  range becomes 0, so every case gets its answer at once; other waits (negative testing)
  go as generated.
- ``GET /v1/events`` streams until the client goes away unless ``follow=false``: a case
  whose ``follow`` is missing or true gets ``follow=false`` (the stream's catch-up part,
  then its end); other values go as generated.
- ``POST /v1/users/{name}/token`` for the fuzzer's own user would replace the token the run
  authenticates with (schemathesis learns the name from ``/v1/users/me``), and every later
  case would get 401: such a case replaces the spare user's token instead
  (``HAL_FUZZ_SELF``, ``HAL_FUZZ_SPARE``).
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

LONG_POLLS = {"/v1/agent/{node}/sync", "/v1/agent/{node}/output"}
EVENTS = "/v1/events"
TOKEN = "/v1/users/{name}/token"
SELF = os.environ.get("HAL_FUZZ_SELF", "admin")  # the user whose token the run sends
TRUE = {"true", "1", "yes", "on", "t", "y"}  # what FastAPI reads as a true boolean


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    path, method = case.operation.path, case.method.upper()
    if method == "POST" and path in LONG_POLLS and isinstance(case.body, dict):
        wait = case.body.get("wait_seconds", 0)  # missing: the default, 10 or 20 s
        if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= 60:
            case.body["wait_seconds"] = 0
    elif method == "GET" and path == EVENTS:
        query = case.query if isinstance(case.query, dict) else {}
        if str(query.get("follow", "true")).lower() in TRUE:
            query["follow"] = "false"
        case.query = query
    elif method == "POST" and path == TOKEN and case.path_parameters.get("name") == SELF:
        case.path_parameters["name"] = os.environ.get("HAL_FUZZ_SPARE", "fuzz-spare")
