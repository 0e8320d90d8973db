"""The data-plane integration tests reuse the cache tests' process helpers
(``tests/integration/cache/cachetree.py``: control plane and cache node processes)."""

from __future__ import annotations

import sys
from pathlib import Path

CACHE_TESTS = str(Path(__file__).resolve().parents[1] / "cache")
if CACHE_TESTS not in sys.path:
    sys.path.insert(0, CACHE_TESTS)
