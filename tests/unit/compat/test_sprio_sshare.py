"""``sprio``/``hal prio`` and ``sshare``: Slurm's columns over the REST objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from compat_fakes import FakeClient, answered, call

from hal.wire.priority import (
    FactorValues,
    JobPriorityInfo,
    PriorityList,
    PriorityWeightsInfo,
    ShareInfo,
    ShareList,
)

WEIGHTS = PriorityWeightsInfo(
    age=1000,
    fairshare=10000,
    job_size=100,
    partition=1000,
    qos=500,
    max_age_seconds=604800,
    favor_small=False,
    decay_half_life_seconds=604800,
    calc_period_seconds=60,
)


def _prio(job_id: int, priority: int, fairshare: float) -> JobPriorityInfo:
    return JobPriorityInfo(
        job_id=job_id,
        display_id=str(job_id),
        user="alice",
        account="physics",
        partition="debug",
        qos="normal",
        priority=priority,
        fixed=False,
        nice=0,
        weighted=FactorValues(age=12.4, fairshare=fairshare * 10000, job_size=3.0),
        normalized=FactorValues(age=0.0124, fairshare=fairshare, job_size=0.03),
    )


def _share(account: str, user: str, depth: int, fs: float, usage: float) -> ShareInfo:
    return ShareInfo(
        account=account,
        user=user,
        parent="root" if depth == 1 else "",
        depth=depth,
        raw_shares=1,
        norm_shares=0.5,
        raw_usage=usage,
        norm_usage=0.25,
        effective_usage=0.25,
        fairshare=fs,
    )


@dataclass
class PrioClient(FakeClient):
    prio_calls: list[dict[str, Any]] = field(default_factory=list)
    share_calls: list[dict[str, Any]] = field(default_factory=list)

    def priorities(self, *, validate: bool = True, **query: Any) -> PriorityList:
        self.prio_calls.append(query)
        jobs = [_prio(7, 5015, 0.5), _prio(8, 2515, 0.25)]
        found = PriorityList(plugin="priority/multifactor", weights=WEIGHTS, jobs=jobs)
        return answered(found, validate=validate)  # type: ignore[no-any-return]

    def shares(self, *, validate: bool = True, **query: Any) -> ShareList:
        self.share_calls.append(query)
        rows = [
            ShareInfo(
                account="root",
                user="",
                parent="",
                depth=0,
                raw_shares=0,
                norm_shares=1.0,
                raw_usage=1200.4,
                norm_usage=1.0,
                effective_usage=1.0,
                fairshare=1.0,
            ),
            _share("physics", "", 1, 0.5, 1200.4),
            _share("physics", "alice", 2, 0.574349, 800.0),
        ]
        found = ShareList(decay_half_life_seconds=604800, rows=rows)
        return answered(found, validate=validate, schema="priority.ShareList")  # type: ignore[no-any-return]


def test_sprio_prints_slurms_default_columns_with_weighted_integers() -> None:
    """Every weight set: Slurm 22.05.8's default columns with age, fair share, job size,
    partition and QoS weights (no NICE; ASSOC and TRES only with their weights)."""
    r = call(PrioClient(), "sprio")
    assert r.rc == 0, r.err
    assert r.lines == [
        "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE"
        "  PARTITION        QOS",
        "              7 debug           5015          0         12       5000          3"
        "          0          0",
        "              8 debug           2515          0         12       2500          3"
        "          0          0",
    ]


@dataclass
class ZeroWeights(PrioClient):
    def priorities(self, *, validate: bool = True, **query: Any) -> PriorityList:
        found = super().priorities(**query)
        zero = WEIGHTS.model_copy(
            update={"age": 0, "fairshare": 0, "job_size": 0, "partition": 0, "qos": 0}
        )
        return answered(found.model_copy(update={"weights": zero}), validate=validate)  # type: ignore[no-any-return]


def test_sprio_with_every_weight_0_has_no_factor_columns() -> None:
    """Slurm 22.05.8 with ``priority/multifactor`` and every weight 0: ``sprio`` prints
    ``JOBID PARTITION PRIORITY SITE``, ``-n`` only the priority, and ``-l`` every
    column still."""
    assert call(ZeroWeights(), "sprio", "-w").lines == [
        "          JOBID PARTITION   PRIORITY       SITE",
        "        Weights                               1",
    ]
    assert call(ZeroWeights(), "sprio", "-w", "-n").lines == [
        "          JOBID PARTITION PRIORITY  ",
        "        Weights                     ",
    ]
    assert call(ZeroWeights(), "sprio", "-l").lines[0].split()[-3:] == ["QOS", "NICE", "TRES"]


def test_sprio_normalised_weights_and_filters() -> None:
    client = PrioClient()
    r = call(client, "sprio", "-n", "-h", "-j", "7,8", "-u", "alice")
    assert r.rc == 0, r.err
    assert r.lines[0].split()[4:6] == ["0.0124000", "0.5000000"]
    assert client.prio_calls[-1] == {"users": ["alice"], "ids": ["7", "8"], "partitions": None}
    w = call(client, "sprio", "-w", "-o", "%.15i %.10A %.10F %.10Q")
    assert w.lines[1].split() == ["Weights", "1000", "10000", "500"]


def test_sprio_long_has_the_user_and_a_bad_letter_is_refused() -> None:
    r = call(PrioClient(), "sprio", "-l")
    assert r.lines[0].split()[:4] == ["JOBID", "PARTITION", "USER", "PRIORITY"]
    assert r.lines[1].split()[2] == "alice"
    bad = call(PrioClient(), "sprio", "-o", "%Z")
    assert bad.rc == 1 and "Invalid job format specification: Z" in bad.err


def test_sshare_indents_accounts_and_defaults_to_the_callers_rows() -> None:
    client = PrioClient(user="alice")
    r = call(client, "sshare")
    assert r.rc == 0, r.err
    assert client.share_calls[-1] == {"users": ["alice"], "accounts": None}
    assert r.lines[0].split() == [
        "Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare",
    ]  # fmt: skip
    # as Slurm 22.05.8's: Account's title to the left, a blank at each line's end
    assert r.lines[0].startswith("Account                    User  RawShares")
    assert r.lines[1] == " ".join("-" * w for w in (20, 10, 10, 11, 11, 13, 10)) + " "
    assert r.lines[2].startswith("root ") and r.lines[2].split() == [
        "root",
        "1.000000",
        "1200",
        "1.000000",
    ]
    assert r.lines[3].startswith(" physics ")
    assert r.lines[4].startswith("  physics ")
    assert r.lines[4].split()[1:] == ["alice", "1", "0.500000", "800", "0.250000", "0.574349"]


def test_sshare_all_long_and_parsable() -> None:
    client = PrioClient()
    r = call(client, "sshare", "-a", "-l", "-P", "-A", "physics")
    assert client.share_calls[-1] == {"users": None, "accounts": ["physics"]}
    assert r.lines[0] == (
        "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS"
        "|GrpTRESMins|TRESRunMins"
    )
    assert r.lines[3] == "physics|alice|1|0.500000|800|0.250000|0.250000|0.574349|||"


def test_hal_prio_is_sprio(capsys: pytest.CaptureFixture[str]) -> None:
    """``hal prio`` runs sprio, and both new commands are Slurm commands with shims."""
    from hal.cli.main import SLURM_COMMANDS, main

    assert main(["prio", "--usage"]) == 0
    assert capsys.readouterr().out.startswith("Usage: sprio")
    from hal.compat.commands import COMMANDS
    from hal.compat.shims import SHIM_COMMANDS

    assert {"sprio", "sshare"} <= set(SLURM_COMMANDS) & set(COMMANDS) & set(SHIM_COMMANDS)
