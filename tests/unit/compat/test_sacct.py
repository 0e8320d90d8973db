"""sacct: fixed-width and parsable output, fields, steps and the time window."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, MiB, call, job, running

from hal.compat.sacct import FIELDS
from hal.wire.jobs import GpuUsage, StepRecord


def history() -> FakeClient:
    return FakeClient(
        job_list=[
            job(
                1,
                name="failer",
                state="FAILED",
                reason="NonZeroExitCode",
                exit_code=3,
                start_time=T0,
                end_time=T0 + 86,
                nodes=["vm"],
                account="proj",
            ),
            job(
                2,
                name="killed",
                state="CANCELLED",
                exit_signal=15,
                start_time=T0,
                end_time=T0 + 5,
                nodes=["vm"],
                cancelled_by="0",
            ),
            running(
                3, name="runner", cpus=4, node_count=2, nodes=["n1", "n2"], time_limit_seconds=3600
            ),
            job(4, name="waiter"),
            job(
                9,
                name="old",
                state="COMPLETED",
                start_time=T0 - 5 * 86400,
                end_time=T0 - 4 * 86400,
                submit_time=T0 - 5 * 86400,
                nodes=["vm"],
            ),
        ]
    )


def test_default_fields_and_steps() -> None:
    assert call(history(), "sacct").lines == [
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ",
        "------------ ---------- ---------- ---------- ---------- ---------- -------- ",
        "1                failer      debug       proj          1     FAILED      3:0 ",
        "1.batch           batch                  proj          1     FAILED      3:0 ",
        "2                killed      debug                     1 CANCELLED+      0:0 ",
        "2.batch           batch                                1  CANCELLED     0:15 ",
        "3                runner      debug                     4    RUNNING      0:0 ",
        "3.batch           batch                                2    RUNNING      0:0 ",
        "4                waiter      debug                     0    PENDING      0:0 ",
    ]


def test_allocations_only_brief() -> None:
    assert call(history(), "sacct", "-X", "--brief", "-n").lines == [
        "1                FAILED      3:0 ",
        "2            CANCELLED+      0:0 ",
        "3               RUNNING      0:0 ",
        "4               PENDING      0:0 ",
    ]


def test_parsable_and_parsable2() -> None:
    trailing = call(history(), "sacct", "-X", "-p", "-o", "JobID,State", "-j", "2").lines
    assert trailing == ["JobID|State|", "2|CANCELLED by 0|"]
    plain = call(history(), "sacct", "-X", "-P", "-o", "JobID,State", "-j", "2").lines
    assert plain == ["JobID|State", "2|CANCELLED by 0"]


def test_reason_is_slurm_s_reason_name_without_its_description() -> None:
    """sacct's Reason is Slurm's state_reason (one word); the description Slurm keeps in
    state_desc is not part of it."""
    waiting = job(5, reason="ReqNodeNotAvail, Reserved for maintenance")
    out = call(FakeClient(job_list=[waiting]), "sacct", "-X", "-P", "-n", "-o", "Reason").out
    assert out == "ReqNodeNotAvail\n"


def test_all_listed_fields() -> None:
    fmt = (
        "JobIdRaw,JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode,Elapsed,Start,"
        "End,Submit,ReqMem,MaxRSS,NodeList,User,Timelimit"
    )
    lines = call(history(), "sacct", "-P", "-o", fmt, "-j", "1,3").lines
    assert lines == [
        "JobIDRaw|JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Elapsed|Start|End|"
        "Submit|ReqMem|MaxRSS|NodeList|User|Timelimit",
        "1|1|failer|debug|proj|1|FAILED|3:0|00:01:26|2026-11-21T21:30:20|2026-11-21T21:31:46|"
        "2026-11-21T21:30:20|50M||vm|root|UNLIMITED",
        "1.batch|1.batch|batch||proj|1|FAILED|3:0|00:01:26|2026-11-21T21:30:20|"
        "2026-11-21T21:31:46|2026-11-21T21:30:20|||vm||",
        "3|3|runner|debug||4|RUNNING|0:0|00:01:30|2026-11-21T21:30:30|Unknown|"
        "2026-11-21T21:30:20|25M||n[1-2]|root|01:00:00",
        # the batch step runs on the job's first node alone, as Slurm lists it
        "3.batch|3.batch|batch|||2|RUNNING|0:0|00:01:30|2026-11-21T21:30:30|Unknown|"
        "2026-11-21T21:30:20|||n1||",
    ]


def test_field_width_override() -> None:
    lines = call(history(), "sacct", "-X", "-n", "-o", "JobName%3,State%12", "-j", "1").lines
    assert lines == ["fa+       FAILED "]


def test_sacct_format_environment() -> None:
    result = call(
        history(), "sacct", "-X", "-P", "-n", "-j", "4", environ={"SACCT_FORMAT": "jobid,user"}
    )
    assert result.lines == ["4|root"]


def test_unknown_field() -> None:
    result = call(history(), "sacct", "-o", "JobID,Bogus")
    assert result.rc == 1 and 'Invalid field requested: "Bogus"' in result.err


def test_window_defaults_to_today_but_ids_see_all_time() -> None:
    assert "9" not in [line.split("|")[0] for line in call(history(), "sacct", "-X", "-P").lines]
    assert call(history(), "sacct", "-X", "-P", "-n", "-o", "JobID", "-j", "9").lines == ["9"]
    wide = call(history(), "sacct", "-X", "-P", "-n", "-o", "JobID", "-S", "now-7days").lines
    assert "9" in wide


def test_end_time_excludes_later_submissions() -> None:
    lines = call(
        history(), "sacct", "-X", "-P", "-n", "-o", "JobID", "-S", "now-7days", "-E", "2026-11-20"
    ).lines
    assert lines == ["9"]


@pytest.mark.parametrize(("states", "ids"), [("F", []), ("CA,R", ["3"]), ("pending", ["4"])])
def test_state_filter_without_a_window_is_the_state_now(states: str, ids: list[str]) -> None:
    """Slurm 22.05.8 (docs/slurm-checks.md): ``-s`` without ``-S`` looks at this moment
    only: ``sacct -s R`` lists the jobs running now, ``sacct -s CD`` lists none."""
    lines = call(history(), "sacct", "-X", "-P", "-n", "-o", "JobID", "-s", states).lines
    assert lines == ids


@pytest.mark.parametrize(
    ("window", "states", "ids"),
    [
        (("-S", "21:30:00", "-E", "21:31:50"), "F", ["1"]),  # ended inside the window
        (("-S", "21:30:00", "-E", "21:31:00"), "F", []),  # ended after it
        (("-S", "21:30:00"), "F", []),  # no -E: the window ends where it starts
        (("-S", "21:30:00", "-E", "21:30:25"), "R", ["1", "2"]),  # 3 started at :30
        (("-S", "21:30:00", "-E", "21:30:25"), "PD", ["1", "2", "3", "4"]),
        (("-S", "21:30:40", "-E", "21:30:50"), "R,CA", ["1", "3"]),  # 2 ended at :25
    ],
)
def test_state_filter_is_the_state_during_the_window(
    window: tuple[str, ...], states: str, ids: list[str]
) -> None:
    """Slurm 22.05.8: ``-s X -S a -E b`` lists the jobs that were in state X at some
    moment of [a, b] (PD: waiting, R: running, an end state: ended then), whatever
    their state now; without ``-E`` the window is the moment ``-S``."""
    argv = ("-X", "-P", "-n", "-o", "JobID", "-s", states, *window)
    assert call(history(), "sacct", *argv).lines == ids


@pytest.mark.parametrize(
    ("argv", "ids"),
    [
        (("-j", "1,3,4", "-s", "R"), ["1", "3"]),  # 1 ran, now FAILED
        (("-j", "1,3,4", "-s", "PD"), ["1", "3", "4"]),  # all three waited
        (("-j", "1,3", "-s", "CD"), []),
        (("-j", "1,4", "-s", "PD", "-S", "21:31:00"), ["4"]),  # the moment -S
        (("-j", "1,4", "-s", "PD", "-E", "21:30:00"), []),  # before their submission
    ],
)
def test_ids_with_states_look_back_to_the_beginning_of_time(
    argv: tuple[str, ...], ids: list[str]
) -> None:
    """Slurm 22.05.8 (docs/slurm-checks.md): with -j, ``-s`` asks whether the job was in
    that state at any moment up to now (-S still narrows it to a moment), not its state
    now: ``sacct -j 9 -s PD`` lists 9 though it runs now."""
    lines = call(history(), "sacct", "-X", "-P", "-n", "-o", "JobID", *argv).lines
    assert lines == ids


def test_jobs_never_eligible_are_listed_only_by_id() -> None:
    """Slurm's accounting lists a job in a time window from when it became eligible: a
    held job, one waiting on a dependency or on a --begin still ahead is not in
    ``sacct`` nor ``sacct -s PD -S ... -E ...``, but ``sacct -j`` shows it; once
    cancelled it is in ``-s CA`` (by its end)."""
    held = job(5, name="held", eligible_time=None)
    later = job(6, name="later", eligible_time=T0 + 3600)
    cancelled = job(7, state="CANCELLED", end_time=T0 + 30, eligible_time=None)
    client = FakeClient(job_list=[*history().job_list, held, later, cancelled])
    listed = call(client, "sacct", "-X", "-P", "-n", "-o", "JobID").lines
    assert listed == ["1", "2", "3", "4"]
    waited = ("-s", "PD", "-S", "21:00", "-E", "23:59")
    assert call(client, "sacct", "-X", "-P", "-n", "-o", "JobID", *waited).lines == [
        "1",
        "2",
        "3",
        "4",
        "6",
    ]
    by_id = call(client, "sacct", "-X", "-P", "-n", "-o", "JobID", "-j", "5,6,7").lines
    assert by_id == ["5", "6", "7"]
    fields = ("-P", "-n", "-X", "-o", "JobID,Start,NodeList", "-j", "4,7")
    assert call(client, "sacct", *fields).lines == [
        "4|Unknown|None assigned",  # pending
        "7|None|None assigned",  # ended without starting: Slurm 22.05.8's "None"
    ]
    # it stopped pending when it ended: `sacct -s PD` (the moment now) lists it no longer,
    # as Slurm's (HAL listed it in every window)
    assert call(client, "sacct", "-X", "-P", "-n", "-o", "JobID", "-s", "PD").lines == ["4"]
    ended = ("-s", "CA", "-S", "21:00", "-E", "23:59")
    assert call(client, "sacct", "-X", "-P", "-n", "-o", "JobID", *ended).lines == ["2", "7"]


def test_default_user_is_the_caller_unless_admin() -> None:
    client = history()
    client.user = "alice"
    call(client, "sacct")
    assert client.jobs_calls[-1]["users"] == ["alice"]
    client.admin = True
    call(client, "sacct")
    assert client.jobs_calls[-1]["users"] is None
    call(client, "sacct", "-a")
    assert client.jobs_calls[-1]["history"] is True


def test_step_id_in_jobs_option() -> None:
    """``-j 1.batch`` shows that step alone, ``-j 1.7`` (a step HAL never runs) nothing,
    and ``-j 1`` the job with its steps: Snakemake asks for steps 0..9 of failed jobs."""
    assert call(history(), "sacct", "-P", "-n", "-o", "JobID", "-j", "1.batch").lines == ["1.batch"]
    assert call(history(), "sacct", "-P", "-n", "-o", "JobID", "-j", "1.7").lines == []
    assert call(history(), "sacct", "-P", "-n", "-o", "JobID", "-j", "1").lines == [
        "1",
        "1.batch",
    ]


def test_field_table_titles_are_unique() -> None:
    titles = [title for title, _, _ in FIELDS.values()]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("start", ["21:00", "9:00pm", "midnight", "11/20"])
def test_start_times_without_a_date_look_back(start: str) -> None:
    """sacct reads a time of day or a month/day as the latest such moment before now
    (Slurm's parse_time with its ``past`` flag), not the next one as ``--begin`` does:
    ``-S 21:00`` typed at 21:31 means since 21:00 today, not from 21:00 tomorrow."""
    lines = call(history(), "sacct", "-X", "-P", "-n", "-o", "JobID", "-S", start).lines
    assert lines == ["1", "2", "3", "4"]


def test_end_time_of_day_is_not_tomorrow() -> None:
    lines = call(
        history(), "sacct", "-X", "-P", "-n", "-o", "JobID", "-S", "now-7days", "-E", "noon"
    ).lines
    assert lines == ["9"]  # noon today (T0 is 21:30): only the old job existed by then


def test_user_filter_takes_uids_too() -> None:
    """``-u``/``--uid`` take user names or numeric uids (sacct.1): ``-u 0`` is root."""
    for option in ("-u", "--uid"):
        lines = call(history(), "sacct", "-X", "-P", "-n", "-o", "JobID", option, "0").lines
        assert lines == ["1", "2", "3", "4"]


def test_usage_and_tres_fields() -> None:
    """What a job used (measured by its agent at the end of the batch step) and what it
    held: the job line sums, the batch step line is the first node's share."""
    done = job(
        7,
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 86,
        nodes=["n1", "n2"],
        node_count=2,
        cpus=4,
        gpus=2,
        memory_bytes=8 * 1024 * MiB,
        max_rss_bytes=3 * MiB + 100 * 1024,
        cpu_seconds=12.5,
    )
    fmt = (
        "JobID,MaxRSS,AveRSS,MaxRSSNode,MaxRSSTask,TotalCPU,CPUTime,CPUTimeRAW,ReqTRES,"
        "AllocTRES,NCPUS,ReqNodes,AllocNodes"
    )
    lines = call(FakeClient(job_list=[done, job(8)]), "sacct", "-P", "-n", "-o", fmt).lines
    assert lines == [
        "7|||||00:12.500|00:05:44|344|billing=4,cpu=4,gres/gpu=2,mem=8G,node=2|"
        "billing=4,cpu=4,gres/gpu=2,mem=8G,node=2|4|2|2",
        "7.batch|3172K|3172K|n1|0|00:12.500|00:02:52|172||cpu=2,mem=4G,node=1|2||1",
        "8|||||00:00.000|00:00:00|0|billing=1,cpu=1,mem=50M,node=1||0|1|0",
    ]


def test_tres_usage_of_the_batch_step_with_and_without_gpus() -> None:
    """TRESUsageInMax/Ave as Slurm 22.05.8 prints them (job line blank, the batch step
    its one task's: cpu as a time, memory in K, TRES sorted by name), with gres/gpumem
    and gres/gpuutil for a job whose agent read its GPUs: the most memory, the most and
    the mean utilisation; none while the job runs; cut at 14 columns with '+'."""
    gpu = GpuUsage(mem_bytes=0, max_mem_bytes=81 << 30, util=0, max_util=100, ave_util=72.5)
    ended = {"state": "COMPLETED", "start_time": T0, "end_time": T0 + 86, "nodes": ["g1"]}
    trained = job(7, gpus=1, max_rss_bytes=12304 << 10, cpu_seconds=8.5, gpu_usage=gpu, **ended)
    plain = job(8, max_rss_bytes=2 << 20, cpu_seconds=0.01, **ended)
    client = FakeClient(job_list=[trained, plain, running(9, gpus=1)])
    fmt = "JobID,TRESUsageInMax,TRESUsageInAve"
    assert call(client, "sacct", "-P", "-n", "-o", fmt).lines == [
        "7||",
        "7.batch|cpu=00:00:08,gres/gpumem=81G,gres/gpuutil=100,mem=12304K"
        "|cpu=00:00:08,gres/gpumem=81G,gres/gpuutil=72,mem=12304K",
        "8||",
        "8.batch|cpu=00:00:00,mem=2M|cpu=00:00:00,mem=2M",
        "9||",
        "9.batch||",
    ]
    table = call(client, "sacct", "-j", "7", "-o", "JobID,TRESUsageInMax").lines
    assert table[0] == "JobID        TRESUsageInMax "
    assert table[3] == "7.batch      cpu=00:00:08,+ "


def test_ends_by_a_signal_as_slurm_22_05_8_records_them() -> None:
    """docs/slurm-checks.md: a job's own line keeps 0:0 when it was cancelled or ran out
    of time (slurmctld records the job's end before its script's); a batch step that a
    signal ended is CANCELLED with 0:N, also under a FAILED job (``kill -SEGV $$``)."""
    ended = {"start_time": T0, "end_time": T0 + 60, "nodes": ["vm"]}
    jobs = [
        job(1, name="seg", state="FAILED", exit_signal=11, **ended),
        job(2, name="tlimit", state="TIMEOUT", exit_signal=15, **ended),
        job(3, name="cancelme", state="CANCELLED", exit_signal=15, cancelled_by="0", **ended),
        job(4, name="ex3", state="FAILED", exit_code=3, **ended),
    ]
    lines = call(FakeClient(job_list=jobs), "sacct", "-P", "-n", "-o", "JobID,State,ExitCode")
    assert lines.lines == [
        "1|FAILED|0:11",
        "1.batch|CANCELLED|0:11",
        "2|TIMEOUT|0:0",
        "2.batch|CANCELLED|0:15",
        "3|CANCELLED by 0|0:0",
        "3.batch|CANCELLED|0:15",
        "4|FAILED|3:0",
        "4.batch|FAILED|3:0",
    ]


def _step(step_id: int, state: str, code: int, signal: int = 0) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="sh",
        nodelist="vm",
        ntasks=1,
        state=state,
        exit_code=128 + signal if signal else code,
        exit_signal=signal,
        start_time=T0 + 1,
        end_time=T0 + 2,
    )


@pytest.mark.parametrize(
    ("steps", "derived"),
    [
        ([], "0:0"),  # no srun: the script's own exit 7 does not count
        ([_step(0, "FAILED", 2), _step(1, "CANCELLED", 0, 15), _step(2, "COMPLETED", 0)], "2:0"),
        ([_step(0, "CANCELLED", 0, 15)], "0:15"),  # a signal alone
        ([_step(0, "FAILED", 5), _step(1, "FAILED", 2)], "5:0"),  # the highest code
    ],
)
def test_derived_exit_code_is_the_highest_of_the_srun_steps(
    steps: list[StepRecord], derived: str
) -> None:
    """DerivedExitCode (sacct.1: "the highest exit code returned by the job's job
    steps (srun invocations)"), as Slurm 22.05.8 derived it (``scontrol -d show job``,
    docs/slurm-checks.md): a job whose script exits 7 after `srun sh -c 'exit 2'` and a
    srun killed by SIGTERM reads 2:0 (an exit code outranks a signal); the job's line only."""
    done = job(
        6, state="FAILED", exit_code=7, start_time=T0, end_time=T0 + 3, nodes=["vm"], steps=steps
    )
    lines = call(
        FakeClient(job_list=[done]), "sacct", "-P", "-n", "-o", "JobID,ExitCode,DerivedExitCode"
    ).lines
    assert lines[:2] == [f"6|7:0|{derived}", "6.batch|7:0|"]
    assert all(line.endswith("|") for line in lines[2:])


def test_a_steps_alloc_cpus_and_tres_are_what_it_was_given() -> None:
    """A numbered step shows the CPUs and memory it was given, as ``scontrol show step``
    counts them (an ``--exact --mem=100M`` step of one task in a job of 4 CPUs and 8G);
    a step recorded before HAL kept them shows the job's."""
    given = _step(0, "COMPLETED", 0).model_copy(
        update={"cpus": 1, "memory_bytes": 100 * MiB, "nodelist": "n2"}
    )
    old = _step(1, "COMPLETED", 0)
    done = job(
        9,
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 10,
        nodes=["n1", "n2"],
        node_count=2,
        cpus=4,
        memory_bytes=8 * 1024 * MiB,
        steps=[given, old],
    )
    lines = call(
        FakeClient(job_list=[done]), "sacct", "-P", "-n", "-o", "JobID,AllocCPUS,AllocTRES"
    ).lines
    assert lines[2:] == ["9.0|1|cpu=1,mem=100M,node=1", "9.1|4|cpu=4,mem=8G,node=1"]


def test_an_allocation_has_no_batch_step() -> None:
    """Slurm 22.05.8: sacct of salloc's job (``salloc -N1 sh -c 'srun true;
    srun -n1 hostname'``) lists the job's line and its steps' lines, no ``.batch`` (its
    command runs on the submit host); ``-j ID.batch`` lists nothing, rc 0. A batch job
    keeps its ``.batch`` line."""
    steps = [_step(0, "COMPLETED", 0), _step(1, "COMPLETED", 0)]
    alloc = job(
        3,
        name="interactive",
        interactive=True,
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 5,
        nodes=["vm"],
        node_count=1,
        steps=steps,
    )
    batch = job(
        4,
        name="wrap",
        state="COMPLETED",
        start_time=T0,
        end_time=T0 + 5,
        nodes=["vm"],
        node_count=1,
    )
    client = FakeClient(job_list=[alloc, batch])
    out = call(client, "sacct", "-j", "3,4", "-P", "-o", "JobID,JobName,State,ExitCode")
    assert (out.rc, out.err) == (0, "")
    assert out.lines == [
        "JobID|JobName|State|ExitCode",
        "3|interactive|COMPLETED|0:0",
        "3.0|sh|COMPLETED|0:0",
        "3.1|sh|COMPLETED|0:0",
        "4|wrap|COMPLETED|0:0",
        "4.batch|batch|COMPLETED|0:0",
    ]
    only = call(client, "sacct", "-j", "3.batch", "-n", "-P", "-o", "JobID")
    assert (only.rc, only.out) == (0, "")


def test_cost_is_the_runs_cloud_cost_in_usd_blank_without_one() -> None:
    """HAL's Cost: what the job's cloud nodes cost (so far while it runs), 10 wide and
    right-aligned as sacct's numbers; blank on step lines and for a job on no priced node."""
    client = FakeClient(
        job_list=[
            job(1, state="COMPLETED", start_time=T0, end_time=T0 + 60, nodes=["c1"], cost=0.416),
            job(2, state="COMPLETED", start_time=T0, end_time=T0 + 60, nodes=["vm"]),
        ]
    )
    assert call(client, "sacct", "-o", "JobID,Cost").lines == [
        "JobID              Cost ",
        "------------ ---------- ",
        "1                  0.42 ",
        "1.batch                 ",
        "2                       ",
        "2.batch                 ",
    ]
    assert call(client, "sacct", "-X", "-P", "-n", "-o", "JobID,Cost").lines == ["1|0.42", "2|"]
