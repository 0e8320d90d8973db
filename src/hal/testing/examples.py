"""How many examples a property test tries: all of them in CI (``CI=true``) or with
``HAL_SLOW=1``, a third on a developer's ``make test``, where the suite must stay quick.
The same cases are drawn either way, fewer of them; CI runs every one on each change."""

from __future__ import annotations

import os

FULL = os.environ.get("CI", "").lower() == "true" or os.environ.get("HAL_SLOW") == "1"


def examples(count: int) -> int:
    """``count`` in a full run, a third of it (at least 10) otherwise."""
    return count if FULL else max(10, count // 3)
