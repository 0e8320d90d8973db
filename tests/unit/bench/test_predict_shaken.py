"""``hal bench predict``'s shaken replays: the same jobs, submit times moved a little."""

from __future__ import annotations

from pathlib import Path

from hal.bench.predict import shaken
from hal.sim.workload import load_workload


def test_a_shake_moves_submits_by_at_most_the_spread_and_keeps_every_job(
    tmp_path: Path,
) -> None:
    lines = ["; MaxProcs: 4"]
    for jid in range(1, 41):
        f = [jid, 100 * jid, -1, 50, 1, -1, -1, 1, 60, -1, 1, 1, 1, -1, 1, 1, -1, -1]
        lines.append(" ".join(str(v) for v in f))
    path = tmp_path / "t.swf"
    path.write_text("\n".join(lines) + "\n")
    w = load_workload(path)
    assert shaken(w, 0) is w
    one, again, other = shaken(w, 1), shaken(w, 1), shaken(w, 2)
    assert one == again and one != other  # seeded
    before = {j.id: j.submit for j in w.jobs}
    assert sorted(j.id for j in one.jobs) == sorted(before)
    assert all(abs(j.submit - before[j.id]) <= 30 for j in one.jobs)
    assert [j.submit for j in one.jobs] == sorted(j.submit for j in one.jobs)
