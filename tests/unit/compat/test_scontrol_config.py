"""``scontrol show config`` against what Slurm 22.05.8 prints (docs/slurm-checks.md):
Slurm's keys in Slurm's order, and only keys whose value HAL honours."""

from __future__ import annotations

from hal.compat.scontrol_config import ORDER, config_lines
from hal.wire.nodes import ClusterConfig
from hal.wire.priority import PriorityWeightsInfo

NOW = 1_795_885_281.0


def config(**changes: object) -> ClusterConfig:
    base = ClusterConfig(
        cluster_name="halpeer",
        min_job_age_seconds=300,
        kill_wait_seconds=30,
        version="0.1.0",
        scheduler_interval_seconds=1.0,
        settings={"MaxArraySize": "1001", "SlurmUser": "root(0)", "MailProg": "/bin/mail"},
        node_timeout_seconds=30.0,
        return_to_service=1,
        backfill=True,
        state_save_location="/var/lib/hal",
    )
    return base.model_copy(update=changes)


def pairs(cfg: ClusterConfig) -> dict[str, str]:
    lines = config_lines(cfg, NOW)
    assert lines[0].startswith("Configuration data as of ")
    return {line[:23].rstrip(): line[26:] for line in lines[1:]}


def test_the_node_timeout_is_slurmd_timeout_and_the_wrong_keys_are_gone() -> None:
    """The admin's finding A6: HAL's node timeout is Slurm's SlurmdTimeout, and HAL has no
    gang scheduling time slice."""
    shown = pairs(config())
    assert shown["SlurmdTimeout"] == "30 sec"
    assert "SlurmctldTimeout" not in shown and "SchedulerTimeSlice" not in shown
    assert shown["ReturnToService"] == "1"
    assert shown["SlurmUser"] == "root(0)"
    assert shown["SchedulerType"] == "sched/backfill"
    assert shown["SelectType"] == "select/cons_tres"
    assert shown["SelectTypeParameters"] == "CR_CPU_MEMORY"
    assert shown["StateSaveLocation"] == "/var/lib/hal"
    # nothing HAL does not honour
    for key in ("DefMemPerNode", "MaxJobCount", "TaskPlugin", "ProctrackType"):
        assert key not in shown


def test_keys_come_in_slurms_order_with_its_padding() -> None:
    lines = config_lines(config(priority=PriorityWeightsInfo(age=1000)), NOW)
    keys = [line.split()[0] for line in lines[1:]]
    assert keys == sorted(keys, key=ORDER.index)
    # Slurm 22.05.8's order is not quite alphabetical
    assert keys.index("PreemptType") < keys.index("PreemptExemptTime")
    assert keys.index("PriorityMaxAge") < keys.index("PriorityType")
    assert keys.index("SlurmUser") < keys.index("SlurmdTimeout") < keys.index("SLURM_VERSION")
    assert "ClusterName             = halpeer" in lines


def test_priority_multifactor_shows_its_weights_and_basic_only_its_type() -> None:
    basic = pairs(config())
    assert basic["PriorityType"] == "priority/basic"
    assert not [k for k in basic if k.startswith("PriorityWeight")]
    prio = PriorityWeightsInfo(age=1000, job_size=100, partition=1000)
    multi = pairs(config(priority=prio))
    assert multi["PriorityType"] == "priority/multifactor"
    assert multi["PriorityWeightAge"] == "1000"
    assert multi["PriorityWeightJobSize"] == "100"
    assert multi["PriorityWeightFairShare"] == "0"
    assert multi["PriorityWeightTRES"] == "(null)"
    assert multi["PriorityDecayHalfLife"] == "7-00:00:00"
    assert multi["PriorityMaxAge"] == "7-00:00:00"
    assert multi["PriorityCalcPeriod"] == "00:01:00"


def test_preemption_and_licenses() -> None:
    off = pairs(config())
    assert (off["PreemptType"], off["PreemptMode"]) == ("preempt/none", "OFF")
    assert off["Licenses"] == "(null)"
    on = pairs(config(preempt_type="qos", preempt_mode="suspend", licenses={"matlab": 10}))
    assert (on["PreemptType"], on["PreemptMode"]) == ("preempt/qos", "SUSPEND")
    assert on["Licenses"] == "matlab:10"


def test_an_older_servers_answer_leaves_out_what_it_did_not_say() -> None:
    old = ClusterConfig(
        cluster_name="hal",
        min_job_age_seconds=300,
        kill_wait_seconds=30,
        version="0.1.0",
        scheduler_interval_seconds=1.0,
    )
    shown = pairs(old)
    for key in ("SlurmdTimeout", "ReturnToService", "SchedulerType", "StateSaveLocation"):
        assert key not in shown
