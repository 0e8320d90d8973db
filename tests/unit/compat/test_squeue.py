"""squeue formats, filters and array folding, as users see them."""

from __future__ import annotations

import json

import pytest
from compat_fakes import T0, FakeClient, call, job, running

from hal.compat.formats import parse_format
from hal.compat.squeue import fold_arrays, job_lines
from hal.wire.jobs import JobInfo


def cluster() -> FakeClient:
    """The queue observed with Slurm 22.05 in the reference, plus a running and two
    finished jobs."""
    array = [
        job(
            7 + i,
            array_job_id=4,
            array_task_id=i,
            name="arr",
            reason="Priority",
            array_max_running=2,
        )
        for i in (1, 2, 3)
    ]
    return FakeClient(
        job_list=[
            job(3),
            *array,
            job(6, name="dep", reason="Dependency", dependency="afterok:5(unfulfilled)"),
            running(2, name="runner", time_limit_seconds=3600, user="alice", partition="gpu"),
            job(
                1,
                state="FAILED",
                reason="NonZeroExitCode",
                exit_code=3,
                start_time=T0,
                end_time=T0 + 5,
                nodes=["vm"],
            ),
            job(
                11,
                state="CANCELLED",
                reason="None",
                exit_signal=15,
                start_time=T0,
                end_time=T0 + 5,
                nodes=["vm"],
            ),
        ]
    )


def test_default_format_matches_slurm() -> None:
    result = call(cluster(), "squeue")
    assert result.rc == 0
    assert result.lines == [
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
        "                 3     debug  sleeper     root PD       0:00      1 (Resources)",
        "         4_[1-3%2]     debug      arr     root PD       0:00      1 (Priority)",
        "                 6     debug      dep     root PD       0:00      1 (Dependency)",
        "                 2       gpu   runner    alice  R       1:30      1 vm",
    ]


def test_long_format_has_time_line_and_full_states() -> None:
    lines = call(cluster(), "squeue", "-l").lines
    assert lines[0] == "Sat Nov 21 21:32:00 2026"
    assert lines[1] == (
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES "
        "NODELIST(REASON)"
    )
    assert lines[-1] == (
        "                 2       gpu   runner    alice  RUNNING       1:30   1:00:00      1 vm"
    )


def test_unfolded_with_r_and_finished_with_t_all() -> None:
    lines = call(cluster(), "squeue", "-h", "-r", "-t", "all", "-o", "%i %t %r").lines
    assert lines == [
        "3 PD Resources",
        "4_1 PD Priority",
        "4_2 PD Priority",
        "4_3 PD Priority",
        "6 PD Dependency",
        "11 CA None",
        "1 F NonZeroExitCode",
        "2 R None",
    ]


def test_finished_jobs_show_reason_or_nodes() -> None:
    lines = call(cluster(), "squeue", "-h", "-t", "F,CA", "-o", "%i %R").lines
    assert lines == ["11 vm", "1 (NonZeroExitCode)"]
    never_ran = job(12, state="CANCELLED", reason="DependencyNeverSatisfied")
    shown = call(FakeClient(job_list=[never_ran]), "squeue", "-h", "-t", "all", "-o", "%i|%R|")
    assert shown.lines == ["12||"]  # (Slurm 22.05.8: a job cancelled while pending)


@pytest.mark.parametrize(
    ("states", "ids"),
    [
        ("PD", ["3", "4_[1-3%2]", "6"]),
        ("pending", ["3", "4_[1-3%2]", "6"]),
        ("R", ["2"]),
        ("running,failed", ["1", "2"]),
        ("ALL", ["3", "4_[1-3%2]", "6", "11", "1", "2"]),
        ("CF", []),  # a Slurm state HAL never has: accepted, matches nothing
    ],
)
def test_state_filter(states: str, ids: list[str]) -> None:
    result = call(cluster(), "squeue", "-h", "-o", "%i", "-t", states)
    assert sorted(result.lines) == sorted(ids)


def test_invalid_state() -> None:
    result = call(cluster(), "squeue", "-t", "bogus")
    assert (result.rc, result.err) == (1, "squeue: error: Invalid job state specified: bogus\n")


def test_user_partition_name_filters() -> None:
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-u", "alice").lines == ["2"]
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-p", "gpu").lines == ["2"]
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-n", "dep").lines == ["6"]
    assert call(cluster(), "squeue", "-h", "-o", "%i", "--name=arr,dep").lines == [
        "4_[1-3%2]",
        "6",
    ]


def test_me_uses_the_token_user() -> None:
    client = cluster()
    client.user = "alice"
    assert call(client, "squeue", "-h", "-o", "%i", "--me").lines == ["2"]


def test_job_ids_show_whole_arrays_and_ended_jobs_only_with_states() -> None:
    """Slurm 22.05.8: ``squeue -j J`` of a job that has ended prints nothing
    and exits 0 (``-t all`` shows it); HAL listed it, so a ``while [ -n "$(squeue -h -j
    $J)" ]`` loop waited out the five minutes ended jobs are listed. An element an
    existing array lacks is no error either."""
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-j", "1").lines == []
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-j", "1", "-t", "all").lines == ["1"]
    assert call(cluster(), "squeue", "-h", "-o", "%i %t", "-j", "1,2").lines == ["2 R"]
    missing = call(cluster(), "squeue", "-h", "-j", "4_9")
    assert (missing.rc, missing.out, missing.err) == (0, "", "")
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-r", "-j", "4").lines == [
        "4_1",
        "4_2",
        "4_3",
    ]
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-j", "4_2").lines == ["4_2"]
    assert call(cluster(), "squeue", "-h", "-o", "%i", "-j", "9").lines == ["4_2"]


def test_unknown_single_job_id_is_an_error() -> None:
    """ReFrame had to cope with this: Slurm exits 1 (reframe-hpc/reframe#3122)."""
    result = call(cluster(), "squeue", "-j", "999")
    assert result.rc == 1
    assert result.out == ""
    assert result.err == "slurm_load_jobs error: Invalid job id specified\n"


def test_unknown_id_among_several_is_just_missing() -> None:
    result = call(cluster(), "squeue", "-h", "-o", "%i", "-j", "3,999")
    assert (result.rc, result.lines) == (0, ["3"])


def test_existing_id_filtered_away_prints_nothing() -> None:
    result = call(cluster(), "squeue", "-h", "-j", "3", "-u", "nobody")
    assert (result.rc, result.out) == (0, "")


def test_bad_job_id() -> None:
    assert call(cluster(), "squeue", "-j", "x1").err == "squeue: error: Invalid job id: x1\n"


LETTERS = [
    ("%i", "JOBID", "2"),
    ("%A", "JOBID", "2"),
    ("%F", "ARRAY_JOB_ID", "2"),
    ("%K", "ARRAY_TASK_ID", "N/A"),
    ("%j", "NAME", "runner"),
    ("%u", "USER", "alice"),
    ("%P", "PARTITION", "gpu"),
    ("%a", "ACCOUNT", "proj"),
    ("%q", "QOS", "(null)"),
    ("%t", "ST", "R"),
    ("%T", "STATE", "RUNNING"),
    ("%M", "TIME", "1:30"),
    ("%l", "TIME_LIMIT", "1:00:00"),
    ("%L", "TIME_LEFT", "58:30"),
    ("%D", "NODES", "2"),
    ("%C", "CPUS", "8"),
    ("%m", "MIN_MEMORY", "4G"),
    ("%b", "TRES_PER_NODE", "gres/gpu:2"),
    ("%N", "NODELIST", "n[1-2]"),
    ("%R", "NODELIST(REASON)", "n[1-2]"),
    ("%r", "REASON", "None"),
    ("%S", "START_TIME", "2026-11-21T21:30:30"),
    ("%e", "END_TIME", "2026-11-21T22:30:30"),
    ("%V", "SUBMIT_TIME", "2026-11-21T21:30:20"),
    ("%E", "DEPENDENCY", "(null)"),
    ("%Q", "PRIORITY", "100"),
    ("%y", "NICE", "0"),
    ("%k", "COMMENT", "(null)"),
    ("%Z", "WORK_DIR", "/home/root"),
    ("%f", "FEATURES", "a100&ib"),
    ("%Y", "SCHEDNODES", "(null)"),
    ("%B", "EXEC_HOST", "n1"),
    ("%o", "COMMAND", "(null)"),  # a --wrap or stdin script has no command
]


@pytest.mark.parametrize(("fmt", "title", "value"), LETTERS)
def test_format_letters(fmt: str, title: str, value: str) -> None:
    info = running(
        2,
        name="runner",
        user="alice",
        partition="gpu",
        account="proj",
        time_limit_seconds=3600,
        node_count=2,
        nodes=["n1", "n2"],
        cpus=8,
        memory_bytes=8 << 30,
        gpus=4,
        constraint=["a100", "ib"],
    )
    assert job_lines(parse_format(fmt), [info], T0 + 100, header=True) == [title, value]


def test_pending_letters() -> None:
    info = job(
        5,
        expected_start=T0 + 3600,
        dependency="afterok:4",
        dependency_state="afterok:4(unfulfilled)",
        reason="Dependency",
    )
    layout = parse_format("%S|%e|%M|%L|%N|%K|%E")
    assert job_lines(layout, [info], T0, header=False) == [
        "2026-11-21T22:30:20|N/A|0:00|UNLIMITED||N/A|afterok:4(unfulfilled)"
    ]


def test_end_of_a_running_job_without_a_limit_is_none() -> None:
    """Slurm 22.05.8's squeue %e: NONE, where HAL printed N/A."""
    layout = parse_format("%e")
    assert job_lines(layout, [running(6, time_limit_seconds=0)], T0, header=False) == ["NONE"]


def test_widths_alignment_and_cutting() -> None:
    info = job(123456, name="a-very-long-name")
    layout = parse_format("%.10i|%-10j|%5j|%.3j|%20Y|")
    assert job_lines(layout, [info], T0, header=False) == [
        "    123456|a-very-lon|a-ver|a-v|(null)              |"
    ]


def test_command_is_the_script_path_and_its_arguments() -> None:
    """``squeue -o %o`` / ``-O Command``: what ``scontrol show job`` prints as ``Command=``
    (the batch script's full path, then its arguments), as Slurm's squeue prints it."""
    info = job(5, script_path="/home/alice/run.sh", script_args=["in.dat", "-x"])
    assert call(FakeClient(job_list=[info]), "squeue", "-o", "%o").lines == [
        "COMMAND",
        "/home/alice/run.sh in.dat -x",
    ]
    assert call(FakeClient(job_list=[info]), "squeue", "-h", "-O", "Command:.30").lines == [
        "  /home/alice/run.sh in.dat -x"
    ]


def test_requested_and_excluded_nodes_and_node_lists_are_never_cut_right_aligned() -> None:
    """As Slurm 22.05.8 prints them (docs/slurm-checks.md): %n and %x are the
    -w and -x node lists; a right-aligned node list (%.3N, %.3n, %.3x, a running job's
    %.3R) is padded but not cut, nor are the titles NODELIST and NODELIST(REASON); a
    pending job's reason, REQ_NODES/EXC_NODES titles and other columns are cut, and a
    left-aligned column (%3N) cuts everything."""
    jobs = [
        job(
            1, name="wrap", exc_nodes=["nonode", "other1", "other2", "other3"], reason="JobHeldUser"
        ),
        running(2, name="averyveryverylongname", nodes=["localhost"], req_nodes=["localhost"]),
    ]
    fmt = "%.3i|%.3N|%.3R|%.3B|%.3j|%.3x|%.3n"
    assert call(FakeClient(job_list=jobs), "squeue", "-o", fmt).lines == [
        "JOB|NODELIST|NODELIST(REASON)|EXE|NAM|EXC|REQ",
        "  1|   |(Jo|n/a|wra|nonode,other[1-3]|   ",
        "  2|localhost|localhost|loc|ave|   |localhost",
    ]
    assert call(FakeClient(job_list=jobs), "squeue", "-o", "%3N|%3R|%3x|%3n").lines == [
        "NOD|NOD|EXC|REQ",
        "   |(Jo|non|   ",
        "loc|loc|   |loc",
    ]
    assert call(FakeClient(job_list=jobs), "squeue", "-h", "-O", "ReqNodes").lines == [
        "".ljust(20),
        "localhost".ljust(20),
    ]


def test_letters_for_what_hal_does_not_track_print_as_slurms_defaults() -> None:
    """Slurm 22.05.8 (docs/slurm-checks.md): %p is %Q / 2^32 with 14 decimals, %c the
    CPUs per task, %U/%G/%g the user's ids; %d %H %I %J %z %O %w %X %s what a job that
    asked for none of them shows. HAL refused each, failing a site's whole format."""
    fmt = "%i|%p|%c|%U|%G|%g|%d|%H|%I|%J|%z|%O|%w|%X|%s|"
    result = call(cluster(), "squeue", "-h", "-j", "3", "-o", fmt)
    assert result.rc == 0, result.err
    assert result.lines == ["3|0.00000002328306|1|0|0|root|0|*|*|*|*:*:*|0|(null)|N/A||"]
    header = call(cluster(), "squeue", "-j", "3", "-o", "%p %c %U %G %g %z").lines[0]
    assert header == "PRIORITY MIN_CPUS UID GROUP GROUP S:C:T"


def test_long_format_option() -> None:
    """-O columns are 20 wide and left-aligned unless sized; no separator is added."""
    lines = call(cluster(), "squeue", "-O", "JobID,Name:10,State:.9,TimeLimit", "-j", "2").lines
    assert lines == [
        "JOBID               NAME          STATETIME_LIMIT          ",
        "2                   runner      RUNNING1:00:00             ",
    ]


def test_long_format_suffix_follows_its_column() -> None:
    """Slurm's -O field is ``type[:[.][size][suffix]]``: text after the size (a space, a
    ``|``) is printed after the column, the way scripts separate -O columns."""
    lines = call(cluster(), "squeue", "-h", "-O", "JobID:.4|,Name:5 ,State:3", "-j", "2").lines
    assert lines == ["   2|runne RUN"]


def test_a_colon_without_a_size_is_width_0() -> None:
    """``Field:|``: Slurm reads the size after the colon with strtol, so it is 0 and the
    values come unpadded (`30|short|`); HAL padded them to 20."""
    lines = call(cluster(), "squeue", "-O", "JobID:|,Name:|,State:", "-j", "2").lines
    assert lines == ["JOBID|NAME|STATE", "2|runner|RUNNING"]


def test_long_format_unknown_names_are_dropped_with_slurms_warning() -> None:
    """Slurm 22.05.8: ``squeue -O jobid,bogus:5x`` says ``squeue: error:
    Invalid job format specification: bogus`` on stderr (the name as written), drops the
    field and its width, prints only its suffix, rc 0 (HAL refused it, rc 1)."""
    result = call(cluster(), "squeue", "-O", "JobID,bogus:5x", "-j", "2")
    assert result.rc == 0
    assert result.err == "squeue: error: Invalid job format specification: bogus\n"
    assert result.lines == ["JOBID               x", "2                   x"]
    several = call(cluster(), "squeue", "-h", "-O", "xx:2^,JobID:.3|,Bogus", "-j", "2")
    assert several.rc == 0
    assert several.err.splitlines() == [
        "squeue: error: Invalid job format specification: xx",
        "squeue: error: Invalid job format specification: Bogus",
    ]
    assert several.lines == ["^  2|"]
    # nothing known: an empty line for the title and for each job
    none = call(cluster(), "squeue", "-O", "bogus", "-j", "2")
    assert (none.rc, none.out) == (0, "\n\n")


def test_an_empty_long_format_prints_empty_lines() -> None:
    """Slurm 22.05.8: ``squeue -O ''`` (and ``-O ,``) prints an empty line
    for the title and one for each job, rc 0, with no warning; ``-O ' '`` the same after
    ``squeue: error: Invalid job format specification:  `` (a blank name), as a name
    missing before ``:3x`` is; empty items between commas are skipped. HAL refused an
    empty ``-O``."""
    for spec in ("", ","):
        empty = call(cluster(), "squeue", "-O", spec, "-j", "2")
        assert (empty.rc, empty.out, empty.err) == (0, "\n\n", "")
    assert call(cluster(), "squeue", "-h", "--Format=", "-j", "2").out == "\n"
    blank = call(cluster(), "squeue", "-O", " ", "-j", "2")
    assert (blank.rc, blank.out) == (0, "\n\n")
    assert blank.err == "squeue: error: Invalid job format specification:  \n"
    skipped = call(cluster(), "squeue", "-O", "JobID:5,,Name:6", "-j", "2")
    assert (skipped.err, skipped.lines) == ("", ["JOBIDNAME  ", "2    runner"])
    nameless = call(cluster(), "squeue", "-O", "JobID:5,:3x", "-j", "2")  # Slurm's too
    assert nameless.err == "squeue: error: Invalid job format specification: \n"
    assert nameless.lines == ["JOBIDx", "2    x"]


def test_start_uses_the_planner_estimate() -> None:
    client = FakeClient(job_list=[job(5, expected_start=T0 + 600), job(6), running(7)])
    lines = call(client, "squeue", "--start").lines
    assert lines == [
        "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES "
        "SCHEDNODES           NODELIST(REASON)",
        "                 5     debug  sleeper     root PD 2026-11-21T21:40:20      1 "
        "(null)               (Resources)",
        "                 6     debug  sleeper     root PD                 N/A      1 "
        "(null)               (Resources)",
    ]


def test_sort_option() -> None:
    client = FakeClient(job_list=[job(1, name="b"), job(2, name="a"), job(3, name="c")])
    assert call(client, "squeue", "-h", "-o", "%i", "--sort=j").lines == ["2", "1", "3"]
    assert call(client, "squeue", "-h", "-o", "%i", "-S", "-i").lines == ["3", "2", "1"]


def test_default_sort_priority_descending_within_state() -> None:
    client = FakeClient(job_list=[job(1, priority=5), job(2, priority=50), running(3)])
    assert call(client, "squeue", "-h", "-o", "%i").lines == ["2", "1", "3"]


def test_fold_keeps_single_pending_element_and_running_ones() -> None:
    jobs = [
        job(8, array_job_id=4, array_task_id=1, state="RUNNING"),
        job(9, array_job_id=4, array_task_id=2),
        job(10, array_job_id=5, array_task_id=0),
        job(11, array_job_id=5, array_task_id=2),
        job(12, array_job_id=5, array_task_id=3),
    ]
    assert [j.display_id for j in fold_arrays(jobs)] == ["4_1", "4_2", "5_[0,2-3]"]


def test_json_lists_ended_jobs_without_t() -> None:
    """Slurm 22.05.8's ``squeue --json`` lists every job slurmctld holds, ended ones too
    (on the peer); HAL's left them out without ``-t``, so a script polling it
    for its job's end never saw it. (Slurm's ignores every filter with --json; HAL keeps
    those asked for.)"""
    listed = json.loads(call(cluster(), "squeue", "--json").out)["jobs"]
    states = {j["job_id"]: j["job_state"] for j in listed}
    assert states[1] == ["FAILED"] and states[2] == ["RUNNING"] and states[3] == ["PENDING"]
    alice = json.loads(call(cluster(), "squeue", "--json", "-u", "alice").out)["jobs"]
    assert [j["job_id"] for j in alice] == [2]


def test_json_has_slurm_shape() -> None:
    result = call(cluster(), "squeue", "--json", "-j", "1", "-t", "all")
    data = json.loads(result.out)
    assert data["errors"] == [] and data["warnings"] == []
    (record,) = data["jobs"]
    assert record["job_id"] == 1
    assert record["job_state"] == ["FAILED"]
    assert record["state_reason"] == "NonZeroExitCode"
    assert record["exit_code"]["status"] == ["ERROR"]
    assert record["exit_code"]["return_code"] == {"set": True, "infinite": False, "number": 3}
    assert record["time_limit"] == {"set": False, "infinite": True, "number": 0}
    assert record["nodes"] == "vm"


def test_clusters_and_all_are_accepted() -> None:
    assert call(cluster(), "squeue", "-a", "-M", "hal", "-h", "-o", "%i", "-j", "3").lines == ["3"]


def test_unknown_option() -> None:
    result = call(cluster(), "squeue", "--yaml")
    assert result.rc == 1
    assert result.err.startswith("squeue: error: unrecognized option '--yaml'")


def test_server_404_for_an_id_is_the_slurm_error() -> None:
    from hal.core.errors import NotFound

    class Strict(FakeClient):
        def jobs(self, **query: object) -> list[JobInfo]:  # type: ignore[override]
            raise NotFound("job 5 not found")

    result = call(Strict(), "squeue", "-j", "5")
    assert (result.rc, result.err) == (1, "slurm_load_jobs error: Invalid job id specified\n")


def test_dependency_letter_is_what_the_server_says_is_left() -> None:
    """%E prints what is left of the dependency with each condition's status (the
    server's: tests/unit/state/test_dependency_view.py), ``(null)`` once it holds."""
    left = "afterok:4(failed),afterok:5(unfulfilled)"
    waiting = job(6, reason="Dependency", dependency="afterok:4:5", dependency_state=left)
    met = job(7, reason="Resources", dependency="afterok:4")
    assert job_lines(parse_format("%E"), [waiting, met], T0, header=False) == [left, "(null)"]
