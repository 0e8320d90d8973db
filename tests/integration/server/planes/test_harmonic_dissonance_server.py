"""``hal harmonic dissonance`` and ``hal harmonic eval`` against a real server: before
any job has ended, every cell reads the prior with no observations, and the evaluation
has no outcomes (dashes, nulls in JSON). (Learning from job ends:
tests/unit/server/test_dissonance_service.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from hal.testing.live import LiveServer


def test_a_fresh_server_shows_the_prior_and_nothing_to_evaluate(tmp_path: Path) -> None:
    with LiveServer(tmp_path) as live:
        table = live.cli("harmonic", "dissonance")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[1].split() == ["VICTIM", "CPU", "MEMORY", "IO", "NETWORK", "LIGHT"]
        assert lines[2].split()[:3] == ["cpu", "1.05", "(0)"]
        assert "0 job ends learnt" in lines[-1]
        found = json.loads(live.cli("harmonic", "dissonance", "--json").stdout)
        assert len(found["cells"]) == 25 and found["prior"] == 1.05
        assert {c["observations"] for c in found["cells"]} == {0}

        checked = json.loads(live.cli("harmonic", "eval", "--json").stdout)
        assert checked["all"] == {"outcomes": 0, "mae": None, "baseline_mae": None}
        text = live.cli("harmonic", "eval").stdout
        assert "all" in text and " - " in text
