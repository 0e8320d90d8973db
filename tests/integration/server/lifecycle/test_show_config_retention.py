"""``scontrol show config`` shows the running server's ``[accounting]`` retentions under
slurmdbd.conf's names, ``PurgeEventAfter`` and ``PurgeJobAfter`` (``NONE`` when that kind
of record is kept forever, as ``sacctmgr show config`` prints an unset one): an operator
checking what a server purges saw neither. And its passes' bounds under
SchedulerParameters."""

from __future__ import annotations

from pathlib import Path

from hal.config.accounting import DAY_S, AccountingConfig, Retention
from hal.testing.live import LiveServer


def settings(live: LiveServer) -> dict[str, str]:
    out = live.cli("scontrol", "show", "config")
    assert out.returncode == 0, out.stderr
    pairs = (line.split(" = ", 1) for line in out.stdout.splitlines()[1:])
    return {key.strip(): value for key, value in pairs}


def test_show_config_names_the_servers_retentions(tmp_path: Path) -> None:
    accounting = AccountingConfig(purge_events_after=Retention(seconds=90 * DAY_S))
    overrides: dict[str, object] = {"accounting": accounting}
    with LiveServer(tmp_path / "set", config_overrides=overrides) as live:
        shown = settings(live)
    assert (shown["PurgeEventAfter"], shown["PurgeJobAfter"]) == ("90days", "NONE")
    accounting = AccountingConfig(purge_jobs_after=Retention(months=12))
    overrides = {"accounting": accounting}
    with LiveServer(tmp_path / "other", config_overrides=overrides) as live:
        shown = settings(live)
    assert (shown["PurgeEventAfter"], shown["PurgeJobAfter"]) == ("NONE", "12months")


def test_show_config_names_the_passes_bounds(tmp_path: Path) -> None:
    """SchedulerParameters carries what the server honours of Slurm's: its passes' bounds
    (ADR 0029) and, with backfill in the profile, bf_interval and bf_yield_interval."""
    overrides: dict[str, object] = {
        "scheduler_default_queue_depth": 40,
        "scheduler_sched_interval_s": 90.0,
        "enable_user_top": True,
    }
    with LiveServer(tmp_path, config_overrides=overrides) as live:
        shown = settings(live)
    words = shown["SchedulerParameters"].split(",")
    assert words[0] == "enable_user_top"
    values = dict(word.split("=") for word in words[1:])
    assert values["default_queue_depth"] == "40" and values["sched_interval"] == "90"
    assert values["sched_max_job_start"] == "1000"
    assert float(values["bf_interval"]) > 0 and int(values["bf_yield_interval"]) > 0
