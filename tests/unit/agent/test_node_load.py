"""What an agent reports of its host with each heartbeat (sinfo's FREE_MEM and
CPU_LOAD): MemAvailable and the 1-minute load average, read from /proc."""

from __future__ import annotations

from pathlib import Path

from hal.agent.procfs import node_load


def test_reads_mem_available_not_mem_free_and_the_one_minute_load(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(
        "MemTotal:       16303244 kB\nMemFree:          512000 kB\n"
        "MemAvailable:    8151622 kB\nBuffers:          100 kB\n"
    )
    (tmp_path / "loadavg").write_text("0.42 0.30 0.25 2/345 6789\n")
    assert node_load(str(tmp_path)) == (8151622 * 1024, 0.42)


def test_what_cannot_be_read_is_unknown(tmp_path: Path) -> None:
    assert node_load(str(tmp_path / "missing")) == (None, None)
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")  # a kernel before 3.14
    (tmp_path / "loadavg").write_text("garbage\n")
    assert node_load(str(tmp_path)) == (None, None)


def test_this_host() -> None:
    free, load = node_load()
    assert free is not None and free > 0
    assert load is not None and load >= 0
