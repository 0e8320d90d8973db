"""``hal bench harmonic-dissonance --live``'s pieces that need no cluster: the profile
its *off* server runs (the server's default without the plugin, and a valid one), the
p99 it reports and the phase windows it cuts the service's log into. The live run
itself takes minutes on two agents and is run on request (docs/harmonic.md)."""

from __future__ import annotations

from pathlib import Path

from hal.bench.dissonance_live import latencies, p99, profile_without_plugin
from hal.config.model import HalConfig
from hal.scheduler.framework.profile import build_profile
from hal.scheduler.plugins import DISSONANCE, default_registry
from hal.server.profile import config_default_profile


def test_the_off_profile_is_the_servers_without_the_plugin() -> None:
    off = profile_without_plugin()
    default = config_default_profile(HalConfig())
    assert DISSONANCE in default["plugins"]  # type: ignore[operator]
    assert DISSONANCE not in off["plugins"] and DISSONANCE not in off["score_weights"]
    assert [p for p in default["plugins"] if p != DISSONANCE] == off["plugins"]  # type: ignore[attr-defined]
    built = build_profile(off, default_registry())
    assert DISSONANCE not in {p.name for p, _ in built.score}
    assert "noderesources" in {p.name for p, _ in built.score}


def test_p99_is_the_value_under_which_99_percent_fall() -> None:
    assert p99([]) is None
    assert p99([float(v) for v in range(100, 0, -1)]) == 100.0
    assert p99([float(v) for v in range(1, 1001)]) == 991.0


def test_a_phase_takes_the_latencies_logged_inside_it(tmp_path: Path) -> None:
    log = tmp_path / "service.log"
    log.write_text("100.000 1.5\n101.000 2.5\n102.500 9.0\n104.000 3.0\n")
    assert latencies(log, 101.0, 103.0) == [2.5, 9.0]
    assert latencies(log, 200.0, 300.0) == []
