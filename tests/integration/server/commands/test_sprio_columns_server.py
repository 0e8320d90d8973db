"""sprio's columns, widths and number formats in the live server, as Slurm 22.05.8 prints
them (docs/slurm-checks.md). The weights are those of the real Slurm the outputs were
taken from: age 1000, job size 100, partition 1000, fair share and QoS 0; partitions
``debug`` (PriorityJobFactor 10, the default) and ``other`` (20). Slurm's default columns
are the factors with a weight; ``-l`` prints every factor, ASSOC, NICE and TRES; ``-n``
prints no SITE and a priority with 14 decimals cut to the column; ``-u`` adds USER."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from hal.config.model import PartitionConfig
from hal.config.priority import priority_from_dict
from hal.testing.live import LiveServer, wait_until

POLICY = priority_from_dict(
    {
        "priority": {
            "weight_age": 1000,
            "weight_fairshare": 0,
            "weight_job_size": 100,
            "weight_partition": 1000,
            "weight_qos": 0,
        }
    }
)
PARTITIONS = (
    PartitionConfig(name="debug", default=True, nodes=("node1",), priority_job_factor=10),
    PartitionConfig(name="other", nodes=("node1",), priority_job_factor=20),
)
SCALE = float(0xFFFFFFFF)


@dataclass(frozen=True)
class Queue:
    live: LiveServer
    alice: str  # her token
    plain: int  # root's (admin's) 1-CPU job in debug
    other: int  # in partition other
    nice: int  # --nice=100
    hers: int  # alice's
    pinned: int  # priority set to 4242 by the administrator


@pytest.fixture(scope="module")
def queue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queue]:
    data = tmp_path_factory.mktemp("hal")
    work = tmp_path_factory.mktemp("work")
    overrides = {"kill_wait_seconds": 2, "priority": POLICY, "partitions": PARTITIONS}
    live = LiveServer(data, config_overrides=overrides)
    with live:
        alice = live.add_users("alice")["alice"]
        with live.agents(1, cpus=2, memory="1G"):

            def sbatch(*args: str, token: str | None = None) -> int:
                out = live.cli("sbatch", "--parsable", *args, cwd=work, token=token)
                assert out.returncode == 0, out.stderr
                return int(out.stdout.strip())

            blocker = sbatch("-c", "2", "--wrap", "sleep 300")
            with live.client() as admin:
                wait_until(lambda: admin.job(blocker).state == "RUNNING", message="blocker")
            ids = [
                sbatch("-c", "1", "--wrap", "true"),
                sbatch("-c", "2", "-p", "other", "--wrap", "true"),
                sbatch("-c", "1", "--nice=100", "--wrap", "true"),
                sbatch("-c", "1", "--wrap", "true", token=alice),
                sbatch("-c", "1", "--wrap", "true"),
            ]
            done = live.cli("scontrol", "update", f"JobId={ids[-1]}", "Priority=4242")
            assert done.returncode == 0, done.stderr
            yield Queue(live, alice, *ids)
            live.cli("scancel", str(blocker), *map(str, ids))


def _lines(q: Queue, *args: str) -> list[str]:
    out = q.live.cli("sprio", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_default_columns_are_the_factors_with_a_weight(queue: Queue) -> None:
    """Slurm 22.05.8 with these weights: ``JOBID PARTITION PRIORITY SITE AGE JOBSIZE
    PARTITION`` (no FAIRSHARE, QOS or NICE), jobs by id; HAL printed every factor."""
    lines = _lines(queue)
    assert lines[0] == (
        "          JOBID PARTITION   PRIORITY       SITE        AGE    JOBSIZE  PARTITION"
    )
    ids = [int(line.split()[0]) for line in lines[1:]]
    assert ids == sorted(ids) and queue.pinned in ids and queue.other in ids
    row = {int(line.split()[0]): line for line in lines[1:]}
    assert row[queue.pinned] == f"{queue.pinned:>15} debug    " + "".join(
        f" {v:>10}" for v in (4242, 0, 0, 0, 0)
    )
    assert all(len(line) == 15 + 1 + 9 + 5 * 11 for line in lines)
    assert row[queue.other].split()[1] == "other"
    assert row[queue.other].split()[-1] == "1000"  # 20 of 20, weight 1000
    assert row[queue.plain].split()[-1] == "500"


def test_long_prints_every_factor_the_nice_and_tres(queue: Queue) -> None:
    lines = _lines(queue, "-l")
    assert lines[0] == (
        "          JOBID PARTITION     USER   PRIORITY       SITE        AGE      ASSOC"
        "  FAIRSHARE    JOBSIZE  PARTITION        QOS        NICE                 TRES"
    )
    row = {int(line.split()[0]): line for line in lines[1:]}
    assert row[queue.pinned] == (
        f"{queue.pinned:>15} debug        admin       4242"
        + "          0" * 7
        + "           0"  # NICE, %.11N
        + " " * 21  # TRES, %.20T
    )
    assert row[queue.nice].split()[-1] == "100"
    assert row[queue.hers].split()[2] == "alice"


def test_norm_prints_no_site_and_the_priority_cut_to_ten(queue: Queue) -> None:
    """``sprio -n``: ``%10y`` (14 decimals cut to 10 characters: ``0.00000013``; an
    administrator's priority as is, ``4242.00000``) and the weighted factors, each
    ``%.7f`` in a left-aligned column of 10."""
    lines = _lines(queue, "-n")
    assert lines[0] == "          JOBID PARTITION PRIORITY   AGE        JOBSIZE    PARTITION "
    row = {int(line.split()[0]): line for line in lines[1:]}
    assert row[queue.pinned] == (
        f"{queue.pinned:>15} debug     4242.00000 0.0000000  0.0000000  0.0000000 "
    )
    other = r" +\d+ other     0\.0000\d{4} \d\.\d{7}  \d\.\d{7}  1\.0000000 "
    assert re.fullmatch(other, row[queue.other])


def test_custom_formats_and_the_normalised_priority(queue: Queue) -> None:
    """``%y`` is the weighted factors' sum less the nice (at least 1) over 2^32-1,
    with 14 decimals; an administrator's priority as is. ``%c`` is ``(null)`` outside
    a federation."""
    with queue.live.client() as admin:
        found = {p.job_id: p for p in admin.priorities().jobs}
    lines = _lines(queue, "-o", "%i|%y|%Y|%N|%c")
    assert lines[0] == "JOBID|PRIORITY|PRIORITY|NICE|CLUSTER"
    row = {int(line.split("|")[0]): line.split("|") for line in lines[1:]}
    assert row[queue.pinned] == [str(queue.pinned), "4242.00000000000000", "4242", "0", "(null)"]
    nice = row[queue.nice]
    assert re.fullmatch(r"0\.\d{14}", nice[1]) and nice[3] == "100"
    w = found[queue.nice].weighted
    total = w.site + w.age + w.fairshare + w.job_size + w.partition + w.qos - 100
    assert abs(float(nice[1]) * SCALE - total) < 1.0


def test_weights_in_every_layout(queue: Queue) -> None:
    """Byte for byte what Slurm 22.05.8 printed with these weights."""
    assert _lines(queue, "-w") == [
        "          JOBID PARTITION   PRIORITY       SITE        AGE    JOBSIZE  PARTITION",
        "        Weights                               1       1000        100       1000",
    ]
    assert _lines(queue, "-w", "-l")[1] == (
        "        Weights                                        1       1000          0"
        "          0        100       1000          0                           (null)"
    )
    assert _lines(queue, "-w", "-n") == [
        "          JOBID PARTITION PRIORITY   AGE        JOBSIZE    PARTITION ",
        "        Weights                      1000       100        1000      ",
    ]
    assert _lines(queue, "-w", "-n", "-l") == [
        "          JOBID PARTITION     USER PRIORITY   AGE        ASSOC      FAIRSHARE  "
        "JOBSIZE    PARTITION  QOS        TRES                ",
        "        Weights                               1000       0          0          "
        "100        1000       0                              ",
    ]


def test_user_filter_adds_the_user_column_and_partition_filters(queue: Queue) -> None:
    lines = _lines(queue, "-u", "alice")
    assert lines[0] == (
        "          JOBID PARTITION     USER   PRIORITY       SITE        AGE    JOBSIZE  PARTITION"
    )
    assert [line.split()[:3] for line in lines[1:]] == [[str(queue.hers), "debug", "alice"]]
    norm = _lines(queue, "-n", "-u", "alice")
    assert norm[0] == (
        "          JOBID PARTITION     USER PRIORITY   AGE        JOBSIZE    PARTITION "
    )
    other = _lines(queue, "-p", "other")
    assert other[0] == lines[0].replace("     USER", "")
    assert [int(line.split()[0]) for line in other[1:]] == [queue.other]
