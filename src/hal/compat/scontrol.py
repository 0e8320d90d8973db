"""The ``scontrol`` command: ``show job|step|node|partition|reservation|topology|config|
hostnames``, ``hold``, ``uhold`` (a hold the owner may release), ``release``,
``requeue``, ``requeuehold`` (back in the queue, held by its owner), ``reconfigure``
(administrators: the server re-reads hal.toml),
``update job``, ``update NodeName=... State=...`` (drain, down, resume, undrain), ``ping``
(the node commands are ``compat/scontrol_nodes.py``'s), and
``create|update|delete reservation`` (the reservation words are read and printed by
``compat/reservations.py``).

``show`` prints Slurm's ``Key=Value`` records over indented lines; Snakemake reads
``MinJobAge`` from ``show config``. Keys HAL has no value for are left out rather than
filled with made-up numbers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from hal.compat.formats import (
    duration_long,
    limit_long,
    memory_mib,
    timestamp,
)
from hal.compat.job_fields import (
    batch_command,
    group_field,
    over_subscribe,
    planned_end,
    print_records,
    time_used,
    user_field,
)
from hal.compat.sbatch import parse_constraint
from hal.compat.seam import Console
from hal.compat.time_limits import command_time_limit
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError, InvalidRequest, NotFound, UnsupportedOption
from hal.slurm.mail import check_mail_user, parse_mail_type
from hal.slurm.syntax import (
    compress_hostlist,
    expand_hostlist,
    hostlist_in_order,
    parse_begin,
    parse_dependency,
    parse_memory,
    parse_nodes,
)

if TYPE_CHECKING:  # (``show job`` reads records: pydantic is imported by an update only)
    from hal.wire.jobs import JobInfo, JobUpdate
    from hal.wire.nodes import NodeInfo, PartitionInfo, TopologyInfo

# The modules of scontrol's less common commands (nodes, reservations, config, steps,
# top, write) are imported by those commands: a test or a job's `scontrol requeue` or
# `show job` does not pay for them.

INVALID_JOB_ID = "slurm_load_jobs error: Invalid job id specified"
COMMANDS = (
    "show, hold, uhold, release, suspend, resume, requeue, requeuehold, top, update, create, "
    "delete, write batch_script, reconfigure and ping"
)
UPDATABLE = (
    "TimeLimit, TimeMin, Priority, Nice, JobName, Comment, Partition, Reservation, Requeue, "
    "and of a pending job StartTime, Dependency, QOS, Account, Features, ExcNodeList, "
    "ReqNodeList, ArrayTaskThrottle, NumNodes, NumTasks, MinMemoryNode, MinMemoryCPU, "
    "WorkDir, StdOut, StdErr, MailUser, MailType"
)
NO_TOPOLOGY = "No topology information available"


# Slurm's scontrol takes any abbreviation of a keyword at least this long, the first
# in this order that fits (``sho``, ``rel``, ``upd``; ``show part``, ``show j``)
COMMAND_WORDS = (
    ("show", 3), ("hold", 2), ("uhold", 2), ("release", 3), ("requeue", 3),
    ("requeuehold", 8), ("suspend", 2), ("resume", 3), ("reconfigure", 3), ("update", 1),
    ("create", 2), ("delete", 2), ("write", 1), ("top", 2), ("version", 1), ("ping", 3),
)  # fmt: skip
SHOW_WORDS = (
    ("jobs", 1), ("jobid", 4), ("steps", 2), ("nodes", 1), ("partitions", 1),
    ("reservations", 3), ("licenses", 1), ("topology", 2), ("config", 1),
    ("hostnames", 5), ("hostlist", 5), ("hostlistsorted", 9),
)  # fmt: skip


_SINGULAR = {
    "jobid": "job", "jobs": "job", "steps": "step", "nodes": "node",
    "partitions": "partition", "reservations": "reservation",
}  # fmt: skip


def keyword(word: str, words: tuple[tuple[str, int], ...]) -> str | None:
    """The keyword ``word`` abbreviates (case aside), or None."""
    word = word.lower()
    for full, shortest in words:
        if len(word) >= shortest and full.startswith(word):
            return full
    return None


def scontrol(argv: list[str], console: Console) -> int:
    flags = {arg for arg in argv if arg.startswith("-") and arg != "-"}  # ("-": stdout)
    words = [arg for arg in argv if not arg.startswith("-") or arg == "-"]
    oneliner = bool(flags & {"-o", "--oneliner"})
    details = bool(flags & {"-d", "-dd", "--details"})
    known = {"-o", "--oneliner", "-d", "-dd", "--details", "-Q", "--quiet", "-a", "--all"}
    unknown = flags - known
    if flags & {"-V", "--version"} or [word.lower() for word in words[:1]] == ["version"]:
        console.out(VERSION_LINE)  # (``scontrol version`` as well: Slurm's command word)
        if len(words) > 1 and not flags & {"-V", "--version"}:
            console.err("too many arguments for version keyword")  # (Slurm's, said after)
            return 1
        return 0
    if unknown:
        return console.error(f"option {sorted(unknown)[0]} is not supported by HAL's scontrol")
    if not words:
        return console.error(f"no command given; HAL's scontrol knows {COMMANDS}")
    command, args = keyword(words[0], COMMAND_WORDS) or words[0].lower(), words[1:]
    try:
        if command == "show":
            return _show(args, console, oneliner=oneliner, details=details)
        if command in ("hold", "uhold", "release", "requeue", "requeuehold", "suspend", "resume"):
            return _job_action(command, args, console)
        if command == "update":
            if args and _is_reservation_update(args):
                return _update_reservation(args, console)
            from hal.compat.scontrol_nodes import is_node_update, update_nodes

            if is_node_update(args):
                return update_nodes(args, console)
            if not _names_entity(args):
                console.err("No valid entity in update command")
                console.err(
                    'Input line must include "NodeName", "PartitionName", "Reservation", '
                    '"JobId", or "SlurmctldDebug"'
                )
                return 1
            return _update(args, console)
        if command == "create":
            return _create(args, console)
        if command == "delete":
            return _delete(args, console)
        if command == "reconfigure":
            return _reconfigure(args, console)
        if command == "write":
            from hal.compat.scontrol_write import write

            return write(args, console)
        if command == "top":
            from hal.compat.scontrol_top import top

            return top(args, console)
        if command == "ping":
            from hal.compat.scontrol_nodes import ping

            return ping(console)
    except HalError as err:
        return console.error(err.message)
    return console.error(f"invalid command {words[0]!r}; HAL's scontrol knows {COMMANDS}")


# what an update must name, as Slurm 22.05.8's (``Nodes=`` alone is refused there too);
# HAL's ``update job 12 ...`` as well
_ENTITY_KEYS = ("jobid", "jobname", "partitionname", "reservationname", "slurmctlddebug")


def _names_entity(args: list[str]) -> bool:
    return bool(args) and (
        args[0].lower() == "job"
        or any(word.split("=", 1)[0].lower() in _ENTITY_KEYS for word in args)
    )


def _is_reservation_update(args: list[str]) -> bool:
    first = args[0].lower()
    return first in ("reservation", "res") or first.startswith("reservationname=")


def _reconfigure(args: list[str], console: Console) -> int:
    """``scontrol reconfigure``: silent on success, as Slurm's; a setting that changes
    only at restart is named on stderr (its running value kept)."""
    if args:
        return console.error("reconfigure takes no arguments: scontrol reconfigure")
    from hal.wire.nodes import kept_warning

    done = console.client.reconfigure()
    for key in done.kept:
        console.err(kept_warning(key))
    for warning in done.warnings:
        console.err(warning)
    return 0


def _create(args: list[str], console: Console) -> int:
    if not args or args[0].lower() not in ("reservation", "res", "reservations"):
        return console.error("create what? HAL creates reservations: scontrol create reservation")
    from hal.compat import reservations

    body = reservations.create_body(args[1:], console.clock())
    try:
        made = console.client.create_reservation(body)
    except HalError as err:
        return reservations.create_refused(err, console)
    console.out(f"Reservation created: {made.name}")
    return 0


def _update_reservation(args: list[str], console: Console) -> int:
    words = args[1:] if args[0].lower() in ("reservation", "res") else args
    from hal.compat import reservations

    name, body = reservations.update_body(words, console.clock())
    try:
        console.client.update_reservation(name, body)
    except HalError as err:
        return reservations.update_refused(err, console)
    console.out("Reservation updated.")
    return 0


def _delete(args: list[str], console: Console) -> int:
    """``delete ReservationName=NAME`` (also ``Reservation=NAME``, ``reservation NAME``)."""
    words = args[1:] if args and args[0].lower() in ("reservation", "res") else args
    names = [w.split("=", 1)[1] if "=" in w else w for w in words]
    if len(names) != 1 or not names[0]:
        return console.error("say which reservation: scontrol delete ReservationName=NAME")
    if "=" in words[0] and words[0].split("=", 1)[0].lower() not in _RESERVATION_KEYS:
        return console.error("HAL deletes reservations only: scontrol delete ReservationName=NAME")
    try:
        console.client.delete_reservation(names[0])
    except HalError as err:  # (Slurm names its first word as typed: reservationname=p1)
        from hal.compat import reservations

        return reservations.delete_refused(err, args[0], console)
    return 0


_RESERVATION_KEYS = ("reservationname", "reservation")


def _show(args: list[str], console: Console, *, oneliner: bool, details: bool) -> int:
    if not args:
        return console.error(
            "show what? job, step, node, partition, reservation, licenses, topology, config "
            "or hostnames"
        )
    first, _, value = args[0].partition("=")  # (``show job=12``, ``show jobid=12``)
    what = keyword(first, SHOW_WORDS) or first.lower()
    target = value or (args[1] if len(args) > 1 else None)
    what = _SINGULAR.get(what, what)
    client = console.client
    records: list[list[str]]
    if what in ("job", "jobs"):
        try:
            jobs = (
                client.jobs(ids=[target], include_finished=True, validate=False)
                if target
                else client.jobs(include_finished=True, validate=False)
            )
        except NotFound:
            jobs = []
        if target and not jobs:
            console.err(INVALID_JOB_ID)
            return 1
        if not jobs:
            console.out("No jobs in the system")
            return 0
        records = [job_record(job, console.clock()) for job in jobs]
    elif what in ("node", "nodes"):
        from hal.compat.scontrol_nodes import show_nodes

        return show_nodes(target, console, oneliner=oneliner, details=details)
    elif what in ("partition", "partitions"):
        parts = client.partitions()
        if target:
            parts = [p for p in parts if p.name == target]
            if not parts:
                console.out(f"Partition {target} not found")
                return 1
        members = client.nodes()  # (once, not once per partition)
        records = [partition_record(p, members) for p in parts]
    elif what in ("reservation", "reservations", "res"):
        found = client.reservations()
        if target:
            found = [r for r in found if r.name == target]
            if not found:
                console.out(f"Reservation {target} not found")
                return 1
        if not found:
            console.out("No reservations in the system")
            return 0
        from hal.compat import reservations

        records = [reservations.reservation_record(r) for r in found]
    elif what in ("license", "licenses", "lic"):
        lics = client.licenses()
        if target:
            lics = [lic for lic in lics if lic.name == target]
            if not lics:
                console.out(f"License {target} not lics")
                return 1
        if not lics:
            console.out("No licenses configured")
            return 0
        records = [
            [f"LicenseName={lic.name}", f"Total={lic.total} Used={lic.used} Free={lic.free} "
             "Reserved=0 Remote=no"]
            for lic in lics
        ]  # fmt: skip
    elif what == "topology":
        return _show_topology(client.topology(), target, console)
    elif what == "config":
        from hal.compat.scontrol_config import config_lines

        for line in config_lines(client.cluster_config(), console.clock()):
            console.out(line)
        return 0
    elif what in ("step", "steps"):
        from hal.compat.squeue_steps import show_step

        return show_step(target, console, oneliner=oneliner)
    elif what in ("hostnames", "hostlist", "hostlistsorted"):
        return _show_hosts(what, target, console)
    else:
        return console.error(
            f"cannot show {args[0]!r}; HAL shows job, step, node, partition, reservation, "
            "licenses, topology, config and hostnames"
        )
    print_records(records, console, oneliner=oneliner)
    return 0


def _show_topology(info: TopologyInfo, name: str | None, console: Console) -> int:
    """Slurm prints "No topology information available" as an error but exits 0 (a
    cluster without topology.conf is not a failure); a name that matches nothing fails."""
    if not info.switches and not info.blocks:
        console.error(NO_TOPOLOGY)
        return 0
    lines = topology_lines(info, name)
    if not lines:
        kind = "switch" if info.switches else "block"
        return console.error(f"Topology information contains no {kind} or node named {name}")
    for line in lines:
        console.out(line)
    return 0


def topology_lines(info: TopologyInfo, name: str | None = None) -> list[str]:
    """``scontrol show topology [NAME]``, one line per switch as Slurm's topology/tree
    prints them (``SwitchName=s2 Level=1 LinkSpeed=1 Nodes=n[0-7] Switches=s[0-1]``: an
    upper switch lists every node below it), in configured order; for a topology of
    blocks only, one line per base block as topology/block does. With ``name``: the
    switch (block) of that name, else every one whose nodes include all of ``name``'s
    (a host list): a node's leaf and the switches above it."""
    records: list[tuple[str, list[str], str]] = []  # name, nodes, line
    if info.switches:
        by_name = {s.name: s for s in info.switches}
        below: dict[str, list[str]] = {}

        def nodes_under(switch: str) -> list[str]:  # (the server refuses cycles)
            if switch not in below:
                s = by_name[switch]
                below[switch] = [*s.nodes, *(n for c in s.switches for n in nodes_under(c))]
            return below[switch]

        for s in info.switches:
            nodes = nodes_under(s.name)
            line = f"SwitchName={s.name} Level={s.level} LinkSpeed={s.link_speed}"
            if nodes:
                line += f" Nodes={compress_hostlist(nodes)}"
            if s.switches:
                line += f" Switches={compress_hostlist(s.switches)}"
            records.append((s.name, nodes, line))
    else:
        # the base block size: BlockSizes' first, else (as Slurm) the largest block
        size = info.block_sizes[0] if info.block_sizes else max(len(b.nodes) for b in info.blocks)
        for index, b in enumerate(info.blocks):
            line = (
                f"BlockName={b.name} BlockIndex={index} "
                f"Nodes={compress_hostlist(b.nodes)} BlockSize={size}"
            )
            records.append((b.name, b.nodes, line))
    if name is None:
        return [line for _, _, line in records]
    named = [line for record, _, line in records if record == name]
    if named:
        return named
    wanted = set(expand_hostlist(name, field="topology"))
    return [line for _, nodes, line in records if wanted <= set(nodes)]


def job_record(job: JobInfo, now: float) -> list[str]:
    """A job as ``scontrol show job`` prints it, one list item per line."""
    array = ""
    if job.array_job_id is not None:
        array = f" ArrayJobId={job.array_job_id} ArrayTaskId={job.array_task_id}"
        if job.array_max_running:  # (only with a %N limit, as Slurm 22.05.8 prints it)
            array += f" ArrayTaskThrottle={job.array_max_running}"
    if job.het_job_id is not None:
        array += (
            f" HetJobId={job.het_job_id} HetJobOffset={job.het_job_offset}"
            f" HetJobIdSet={job.het_job_id_set}"
        )
    per_node_mem = memory_mib(job.memory_bytes // max(job.node_count, 1))
    if job.memory_whole_node:  # --mem=0: Slurm 22.05.8 shows the 0 asked (TRES the memory)
        per_node_mem = "0"
    start = job.start_time or job.expected_start
    # (a job of no memory: no mem part, as Slurm's never prints mem=0)
    memory = f",mem={memory_mib(job.memory_bytes)}" if job.memory_bytes else ""
    tres = f"cpu={job.cpus}{memory},node={job.node_count}"
    if job.gpus:
        tres += f",gres/gpu={job.gpus}"
    return [
        f"JobId={job.id}{array} JobName={job.name}",
        f"UserId={user_field(job.user)} GroupId={group_field(job.user)} MCS_label=N/A",
        f"Priority={job.priority} Nice={job.nice} Account={job.account or '(null)'} "
        f"QOS={job.qos or '(null)'}",
        # a description's spaces become underscores, as Slurm writes them "for easier parsing"
        f"JobState={job.state} Reason={job.reason.replace(' ', '_')} "
        f"Dependency={job.dependency_state or '(null)'}",
        f"Requeue={int(job.requeue)} Restarts={job.restarts} "
        f"BatchFlag={0 if job.interactive else 1} Reboot=0 "
        f"ExitCode={job.exit_code}:{job.exit_signal}",
        # a scrontab entry's job (Slurm 20.11's cron jobs; written from memory of Slurm's
        # output: docs/user/scrontab.md)
        *([f"CronJob=Yes CrontabSpec={job.cron}"] if job.cron is not None else []),
        f"RunTime={duration_long(time_used(job, now))} "
        f"TimeLimit={limit_long(job.time_limit_seconds)} "
        f"TimeMin={duration_long(job.time_min_seconds) if job.time_min_seconds else 'N/A'}",
        f"SubmitTime={timestamp(job.submit_time, 'Unknown')} "
        f"EligibleTime={timestamp(job.eligible_time, 'Unknown')}",
        f"StartTime={timestamp(start, 'Unknown')} "
        f"EndTime={timestamp(planned_end(job, start), 'Unknown')} "
        f"Deadline={timestamp(job.deadline, 'N/A')}",
        f"PreemptTime={timestamp(job.preempt_time, 'None')}",
        f"Partition={job.partition} AllocNode:Sid={job.submit_host or '(null)'}:0"
        + (f" Reservation={job.reservation}" if job.reservation else ""),
        f"ReqNodeList={_hostlist(job.req_nodes)} ExcNodeList={_hostlist(job.exc_nodes)}",
        # a job without nodes: "NodeList=" and no BatchHost line (Slurm 22.05.8)
        f"NodeList={compress_hostlist(job.nodes)}",
        *([f"BatchHost={job.nodes[0]}"] if job.nodes else []),
        f"NumNodes={job.node_count} NumCPUs={job.cpus} NumTasks={job.ntasks} "
        f"CPUs/Task={job.cpus_per_task}",
        f"TRES={tres}",
        f"MinCPUsNode={max(job.cpus_per_task, job.min_cpus_per_node)} "
        f"MinMemoryNode={per_node_mem} OverSubscribe={over_subscribe(job)} "
        f"Licenses={job.licenses or '(null)'}",
        f"Features={'&'.join(job.constraint) or '(null)'}",
        f"Comment={job.comment or '(null)'}",
        # HAL's --artifact, pinned (docs/user/artifacts.md): only on the jobs that name some
        *([f"Artifacts={','.join(job.artifacts)}"] if job.artifacts else []),
        *([f"ArtifactDigests={','.join(job.artifact_digests)}"] if job.artifact_digests else []),
        *([f"ArtifactAliases={','.join(job.artifact_aliases)}"] if job.artifact_aliases else []),
        # HAL's --python-env (docs/user/environments.md): its kind and lock's sha256
        *([f"PythonEnv={job.python_env}"] if job.python_env else []),
        *([f"Container={job.container}"] if job.container else []),
        # HAL's --near/--apart rules (docs/harmonic.md): only on the jobs that have some
        *([f"Near={','.join(job.near)}"] if job.near else []),
        *([f"Apart={','.join(job.apart)}"] if job.apart else []),
        f"Command={batch_command(job)}",
        f"WorkDir={job.workdir}",
        f"StdErr={job.stderr}",
        "StdIn=/dev/null",
        f"StdOut={job.stdout}",
        f"MailUser={job.mail_user or '(null)'} MailType={job.mail_type}",
    ]


def _show_hosts(what: str, target: str | None, console: Console) -> int:
    """``show hostnames`` (one a line), ``hostlist`` (compressed in the order given) and
    ``hostlistsorted``, as Slurm's: the list may be split by commas, blanks or newlines
    (``$(cat hostfile)``), repeats are kept, and ``hostnames`` defaults to the job's
    nodes. Nothing to show: Slurm's "host list is empty", exit 0."""
    text = target if target is not None else ""
    if what == "hostnames" and not text:
        text = console.environ.get("SLURM_JOB_NODELIST", "")
    names = [
        name for word in text.split() for name in expand_hostlist(word, field=what, duplicates=True)
    ]
    if not names:
        console.err("scontrol: error: host list is empty")
        return 0
    if what == "hostnames":
        for name in names:
            console.out(name)
    elif what == "hostlist":
        console.out(hostlist_in_order(names))
    else:
        console.out(hostlist_in_order(sorted(names, key=_natural)))
    return 0


def _natural(name: str) -> tuple[str, int]:
    """``n2`` before ``n10``: by prefix, then by the number it ends with."""
    digits = len(name) - len(name.rstrip("0123456789"))
    return (name[:-digits], int(name[-digits:])) if digits else (name, -1)


def _hostlist(names: list[str]) -> str:
    return compress_hostlist(names) if names else "(null)"


def partition_record(partition: PartitionInfo, nodes: list[NodeInfo]) -> list[str]:
    """``scontrol show partition`` in Slurm 22.05.8's order and lines. The keys whose
    value holds for every HAL partition by construction are printed as Slurm prints a
    partition that sets none of them: HAL has no group, account or QoS lists per
    partition, no hidden or root-only partitions, no per-partition CPU, memory or node
    minimum limits, no job defaults, no over-time allowance. Left out: GraceTime,
    DefMemPerNode (a job without ``--mem`` holds no memory in HAL, neither Slurm's
    whole node nor a per-CPU default) and TRES billing (weighted by GPUs in HAL)."""
    members = [n for n in nodes if n.name in partition.nodes]
    default_time = limit_long(partition.default_time_seconds)
    memory = sum(n.memory_bytes for n in members)
    tres = [f"cpu={sum(n.cpus for n in members)}", f"mem={memory_mib(memory)}" if memory else ""]
    tres += [f"node={len(members)}"]
    return [
        f"PartitionName={partition.name}",
        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if partition.default else 'NO'} QoS=N/A",
        f"DefaultTime={'NONE' if not partition.default_time_seconds else default_time} "
        "DisableRootJobs=NO ExclusiveUser=NO Hidden=NO",
        f"MaxNodes={partition.max_nodes or 'UNLIMITED'} "
        f"MaxTime={limit_long(partition.max_time_seconds)} MinNodes=0 LLN=NO "
        "MaxCPUsPerNode=UNLIMITED",
        f"Nodes={compress_hostlist([n.name for n in members]) or '(null)'}",
        f"PriorityJobFactor={partition.priority_job_factor} "
        f"PriorityTier={partition.priority_tier} RootOnly=NO ReqResv=NO OverSubscribe=NO",
        f"OverTimeLimit=NONE PreemptMode={partition.preempt_mode}",
        f"State={partition.state} TotalCPUs={sum(n.cpus for n in members)} "
        f"TotalNodes={len(members)} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "MaxMemPerNode=UNLIMITED",
        "TRES=" + ",".join(t for t in tres if t),
    ]


def _named_jobs(console: Console, name: str) -> list[str]:
    """``JobName=x``: the ids of the caller's jobs named x that have not ended (Slurm
    22.05.8's hold, release and update)."""
    me = console.current_user()
    return [str(job.id) for job in console.client.jobs(names=[name]) if job.user == me]


def _job_ids(args: list[str], console: Console) -> list[str]:
    """The jobs ``args`` name: ids, ``JobId=`` lists and ``JobName=x`` (``_named_jobs``)."""
    ids = []
    for arg in args:
        if arg.lower().startswith("jobname="):
            ids += _named_jobs(console, arg.split("=", 1)[1])
            continue
        value = arg.split("=", 1)[1] if arg.lower().startswith("jobid=") else arg
        ids += [item for item in value.split(",") if item]
    if not ids:
        raise InvalidRequest("give one or more job ids (or JobName=NAME)")
    return ids


def _job_action(command: str, args: list[str], console: Console) -> int:
    client = console.client
    actions: dict[str, Callable[[str], list[int]]] = {
        "hold": client.hold,
        "uhold": partial(client.hold, user=True),  # a hold the owner may release
        "release": client.release,
        "requeue": client.requeue,
        "requeuehold": partial(client.requeue, hold=True),
        "suspend": client.suspend,
        "resume": client.resume,
    }
    action = actions[command]
    if command == "requeuehold" and any(a.lower().startswith("state=") for a in args):
        raise UnsupportedOption(
            "requeuehold State=SpecialExit is not supported by HAL; requeuehold without it "
            "requeues the job held (scontrol release lets it run)"
        )
    rc = 0
    for job_id in _job_ids(args, console):
        try:
            action(job_id)
        except NotFound:
            console.err(f"Invalid job id specified for job {job_id}")
            rc = 1
    return rc


_KEY = re.compile(r"^([A-Za-z]+)=(.*)$")


def _update(args: list[str], console: Console) -> int:
    """``update JobId=12 TimeLimit=2:00:00`` or ``update job 12 TimeLimit=2:00:00``; as in
    Slurm 22.05.8 ``JobId=12,13`` updates both, ``JobName=x`` without a JobId every job
    named x (of the caller's that have not ended), and ``TimeLimit=+5``/``-5`` moves each
    job's limit by that much (HAL refused all three)."""
    job_id = None
    changes: dict[str, object] = {}
    relative: tuple[int, int] | None = None  # (+1 or -1, seconds) of TimeLimit=+/-...
    rest = list(args)
    if len(rest) >= 2 and rest[0].lower() == "job":
        job_id, rest = rest[1], rest[2:]
    from hal.compat.scontrol_partition import is_partition_update, update_partition

    if is_partition_update(rest):  # PartitionName=P State=... (docs/slurm-checks.md, s. 49)
        return update_partition(rest, console)
    for word in rest:
        m = _KEY.match(word)
        if not m:
            raise InvalidRequest(f"cannot read {word!r}; write Key=Value (e.g. TimeLimit=1:00:00)")
        key, value = m.group(1).lower(), m.group(2)
        if key in ("jobid", "job"):
            job_id = value
        elif key == "timelimit" and value.startswith(("+", "-")):
            sign = 1 if value[0] == "+" else -1
            moved = command_time_limit(
                value[1:], console.environ, field="TimeLimit", unlimited=False
            )
            relative = (sign, moved)
        elif key == "timelimit":
            changes["time_limit_seconds"] = command_time_limit(
                value, console.environ, field="TimeLimit"
            )
        elif key == "timemin":
            changes["time_min_seconds"] = command_time_limit(
                value, console.environ, field="TimeMin", unlimited=False
            )
        elif key in ("priority", "nice"):
            if not re.match(r"^-?\d+$", value):
                raise InvalidRequest(f"{m.group(1)} needs an integer, got {value!r}")
            changes[key] = int(value)
        elif key in ("jobname", "name"):
            changes["name"] = value
        elif key in ("comment", "partition", "reservation"):
            changes[key] = value
        elif key == "requeue":
            if value not in ("0", "1"):
                raise InvalidRequest(f"Requeue needs 0 or 1, got {value!r}")
            changes["requeue"] = value == "1"
        elif key in PENDING_KEYS:
            changes.update(_pending_change(m.group(1), PENDING_KEYS[key], value, console))
        else:
            raise InvalidRequest(
                f"Update of {m.group(1)} is not supported by HAL; it can update {UPDATABLE}"
            )
    if job_id is None and "name" in changes:  # JobName=x selects the jobs named x
        ids = _named_jobs(console, str(changes.pop("name")))
        if not ids:
            console.err("No jobs with name found")  # (Slurm's error for no match)
            return 1
    elif job_id is None:
        raise InvalidRequest("give the job: scontrol update JobId=<id> Key=Value ...")
    else:
        ids = [item for item in job_id.split(",") if item]
    if not changes and relative is None:
        raise InvalidRequest(f"nothing to update; give Key=Value pairs for {UPDATABLE}")
    rc = 0
    for one in ids:
        try:
            if relative is not None:
                changes["time_limit_seconds"] = _moved_limit(console, one, *relative)
            console.client.update_job(one, _job_update(changes))
        except NotFound:
            console.err(f"Invalid job id specified for job {one}")
            rc = 1
    return rc


def _job_update(changes: dict[str, object]) -> JobUpdate:
    from pydantic import ValidationError

    from hal.wire.jobs import JobUpdate

    try:
        return JobUpdate.model_validate(changes)
    except ValidationError as err:  # each field's own words, not pydantic's whole report
        said = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise InvalidRequest(f"invalid update: {said}") from None


def _moved_limit(console: Console, job_id: str, sign: int, seconds: int) -> int:
    """``TimeLimit=+T``/``-T``: the job's limit moved by T (at least a minute left)."""
    now = console.client.job(job_id).time_limit_seconds
    if now <= 0:
        raise InvalidRequest(
            f"job {job_id} has no time limit to move; give the new limit (TimeLimit=2:00:00)"
        )
    return max(now + sign * seconds, 60)


# the keys of what only a pending job may change, by the JobUpdate field each sets
PENDING_KEYS = {
    "starttime": "begin_time",
    "eligibletime": "begin_time",  # scontrol(1): "See StartTime"
    "dependency": "dependency",
    "qos": "qos",
    "account": "account",
    "features": "constraint",
    "excnodelist": "exclude",
    "reqnodelist": "nodelist",
    "arraytaskthrottle": "array_max_running",
    "numnodes": "nodes_min",
    "numtasks": "ntasks",
    "minmemorynode": "memory_per_node_bytes",
    "minmemorycpu": "memory_per_cpu_bytes",
    "workdir": "workdir",
    "stdout": "stdout",
    "stderr": "stderr",
    "mailuser": "mail_user",
    "mailtype": "mail_type",
}


def _pending_change(key: str, field: str, value: str, console: Console) -> dict[str, object]:
    """One ``Key=Value`` of ``PENDING_KEYS`` read as sbatch reads its option (``--begin``,
    ``-d``, ``-C``, ``-x``, ``-w``), so a mistake is reported before any request; an
    empty value clears the dependency, the features or a node list."""
    if field == "begin_time":
        return {field: parse_begin(value, console.clock(), field=key)}
    if field == "array_max_running":
        if not value.isdigit():
            raise InvalidRequest(f"{key} needs a count of 0 or more (0: no limit), got {value!r}")
        return {field: int(value)}
    if field == "nodes_min":  # NumNodes=MIN[-MAX], as sbatch -N
        low, high = parse_nodes(value)
        return {"nodes_min": low, "nodes_max": high}
    if field == "ntasks":
        if not value.isdigit() or int(value) < 1:
            raise InvalidRequest(f"{key} needs a positive count, got {value!r}")
        return {field: int(value)}
    if field.startswith("memory_"):
        return {field: parse_memory(value, field=key)}
    if field == "workdir":  # relative to where scontrol runs, as sbatch -D
        return {field: os.path.normpath(os.path.join(console.cwd, value))}
    if field == "mail_type":
        return {field: parse_mail_type(value)}
    if field == "mail_user":
        return {field: check_mail_user(value)}
    if field == "dependency" and value:
        parse_dependency(value, field=key)
    if field == "constraint":
        return {field: parse_constraint(value) if value else []}
    if field in ("exclude", "nodelist"):
        return {field: expand_hostlist(value, field=key) if value else []}
    return {field: value}
