"""scontrol's node commands: ``show node [HOSTLIST]``, ``update NodeName=...`` (also
``Node=``) and ``ping``.

Their outputs, messages and exit codes are Slurm 22.05.8's, checked on the peer
(docs/slurm-checks.md, "Node administration"): Slurm's line first, exactly,
and where HAL has more to say, its hint on the next line. Slurm writes ``Node X not
found`` and ``ping``'s lines on stdout, its refusals of an update on stderr.

``update NodeName=`` sets what HAL's node record holds: the operator's state (DRAIN,
DOWN, RESUME, UNDRAIN, as ``hal drain`` / ``hal resume``) and its reason, and powers an
owned node down or up (POWER_DOWN, POWER_UP; ``[power]``, docs/admin/power.md). Slurm's
other states and keys have no place in it (see ``OTHER_STATES``, ``OTHER_KEYS``).
"""

from __future__ import annotations

import re
import socket
from urllib.parse import urlsplit

from hal.compat.formats import timestamp
from hal.compat.job_fields import print_records
from hal.compat.node_gres import gres, gres_used, tres
from hal.compat.node_states import scontrol_state
from hal.compat.seam import Console
from hal.core.errors import HalError, InvalidRequest, NotFound, PermissionDenied, Unavailable
from hal.slurm.syntax import expand_hostlist
from hal.wire.nodes import NodeInfo

# State= of ``update NodeName=...``: what ``hal drain`` / ``hal resume`` send for it
NODE_STATES = {
    "DRAIN": "DRAIN",
    "DOWN": "DOWN",
    "RESUME": "RESUME",
    "UNDRAIN": "RESUME",
    "POWER_DOWN": "POWER_DOWN",
    "POWER_UP": "POWER_UP",
}
# Slurm's other node states: HAL nodes have no FAIL flag, no scontrol-set "not
# responding" (HAL's follows the agent's heartbeats), no FUTURE nodes, and power down
# once their jobs end (no POWER_DOWN_ASAP / POWER_DOWN_FORCE)
OTHER_STATES = frozenset({"NORESP", "FAIL", "FUTURE", "POWER_DOWN_ASAP", "POWER_DOWN_FORCE"})
# Slurm's other node keys, and why HAL's node record has no place for them: features
# are what the agent registers (``hal agent --feature``), and weight, comment, gres,
# address and the rest have no field to outlive a server restart in
OTHER_KEYS = frozenset(
    {
        "weight", "features", "availablefeatures", "activefeatures", "comment", "gres",
        "cpubind", "extra", "nodeaddr", "nodehostname", "resumeafter",
    }
)  # fmt: skip
VALID_STATES = "Valid states are: NoResp DRAIN FAIL FUTURE RESUME POWER_DOWN POWER_UP UNDRAIN"
INVALID_STATE = "slurm_update error: Invalid node state specified"
INVALID_NAME = "slurm_update error: Invalid node name specified"
INVALID_USER = "slurm_update error: Invalid user id"
NO_REASON = "You must specify a reason when DOWNING or DRAINING a node. Request denied"
_HAL_STATES = "HAL's nodes take State=DRAIN, DOWN, RESUME, UNDRAIN, POWER_DOWN or POWER_UP"

_KEY = re.compile(r"^([A-Za-z]+)=(.*)$")


def is_node_update(args: list[str]) -> bool:
    """``update NodeName=...`` or ``update Node=...`` (Slurm's short form; ``Nodes=`` is
    no entity in Slurm 22.05.8)."""
    return any(word.split("=", 1)[0].lower() in ("nodename", "node") for word in args)


def show_nodes(target: str | None, console: Console, *, oneliner: bool, details: bool) -> int:
    """``show node [n1 | n[1-2] | n1,n2]``: each node's record in the order named; for a
    name no node has, Slurm's ``Node NAME not found`` on stdout and exit code 1."""
    client = console.client
    if not target:
        print_records(
            [node_record(n, details=details) for n in client.nodes()], console, oneliner=oneliner
        )
        return 0
    names = expand_hostlist(target, field="node")
    if len(names) == 1:
        try:
            known = {names[0]: client.node(names[0])}
        except NotFound:
            known = {}
    else:
        known = {n.name: n for n in client.nodes()}
    rc = 0
    for name in names:
        if name in known:
            print_records([node_record(known[name], details=details)], console, oneliner=oneliner)
        else:
            console.out(f"Node {name} not found")
            rc = 1
    return rc


def node_record(node: NodeInfo, *, details: bool = False) -> list[str]:
    """``scontrol show node`` in Slurm 22.05.8's order and lines; ``details`` (``-d``)
    adds Slurm's ``GresUsed=`` line on a node with GPUs.

    A HAL node is its CPU count, as a slurm.conf node given ``CPUs=`` alone: Slurm shows
    that as one-core sockets (``Sockets=CPUs CoresPerSocket=1 ThreadsPerCore=1``, sinfo's
    ``%z``), every CPU usable (``CPUEfctv``), ``Weight=1``, ``TmpDisk=0``, no owner.
    What the agents do not report (Arch, OS, Version, BootTime, energy) is left out.
    ``LastHeartbeat=`` (HAL's own key) is the agent's last contact with the server.
    """
    features = ",".join(node.features) or "(null)"
    mem_mib = node.memory_bytes // (1024 * 1024)
    load = "N/A" if node.cpu_load is None else f"{node.cpu_load:.2f}"
    free = "N/A" if node.free_memory_bytes is None else node.free_memory_bytes // (1024 * 1024)
    lines = [
        f"NodeName={node.name} CoresPerSocket=1",
        f"CPUAlloc={node.cpus_alloc} CPUEfctv={node.cpus} CPUTot={node.cpus} CPULoad={load}",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={gres(node)}",
        *([f"GresUsed={gres_used(node)}"] if details and node.gpus else []),
        f"NodeAddr={node.address or node.name} NodeHostName={node.name}",
        f"RealMemory={mem_mib} AllocMem={node.memory_alloc_bytes // (1024 * 1024)} "
        f"FreeMem={free} Sockets={node.cpus} Boards=1",
        f"State={scontrol_state(node)} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"Partitions={','.join(node.partitions) or '(null)'}",
        f"LastHeartbeat={timestamp(node.last_heartbeat or None, 'Unknown')}",
        "CfgTRES=" + tres(node.cpus, node.memory_bytes, node.gpus),
        # Slurm leaves out what is not allocated: "cpu=2" with no memory, "" when idle
        "AllocTRES=" + tres(node.cpus_alloc, node.memory_alloc_bytes, node.gpus_alloc),
    ]
    if node.reason:
        # Slurm's: who set it and when, when it knows when (a reason HAL stored before
        # it recorded them prints bare)
        when = node.reason_time
        by = "" if when is None else f" [{node.reason_user or 'Unknown'}@{timestamp(when)}]"
        lines.append(f"Reason={node.reason}{by}")
    return lines


def update_nodes(args: list[str], console: Console) -> int:
    """``update NodeName=n[1-3] State=DRAIN Reason="disk errors"``, as Slurm 22.05.8:

    - DRAIN and DOWN need a Reason; a drained node set DOWN stays drained (DOWN+DRAIN);
    - RESUME of a node neither drained nor down is Slurm's "Invalid node state
      specified", exit code 1, the other nodes named resumed all the same;
    - UNDRAIN resumes the drained nodes and leaves the others as they are, exit code 0;
    - ``Reason=`` alone rewords the reason of a drained, draining or down node (a new
      user and time) and leaves any other node as it is, exit code 0.
    """
    names: list[str] = []
    state = reason = ""
    reason_given = False
    for word in args:
        m = _KEY.match(word)
        if not m:
            return _aborted(console, word)
        key, value = m.group(1).lower(), m.group(2)
        if key in ("nodename", "node"):
            names = expand_hostlist(value, field="NodeName")
        elif key == "state":
            state = value.upper()
            if state in OTHER_STATES:
                console.err(INVALID_STATE)
                return console.error(f"{_HAL_STATES}: {value} has no HAL equivalent")
            if state not in NODE_STATES:
                for line in (f"Invalid input: {word}", "Request aborted", VALID_STATES):
                    console.err(line)
                console.err("Not all states are valid given a node's prior state")
                return 1
        elif key == "reason":
            reason, reason_given = value, True
        elif key in OTHER_KEYS:
            raise InvalidRequest(
                f"Update of node {m.group(1)} is not supported by HAL: a HAL node's record "
                "holds its State and Reason (features are what its agent registers, "
                "hal agent --feature)"
            )
        else:
            return _aborted(console, word)
    if not state and not reason_given:
        console.err("No changes specified")
        return 1
    if state in ("DRAIN", "DOWN") and not reason.strip():
        console.err(NO_REASON)
        return 1
    known = {node.name: node for node in console.client.nodes()}
    unknown = [name for name in names if name not in known]
    if unknown:
        console.err(INVALID_NAME)
        return console.error(f"no node named {','.join(unknown)} (sinfo -N lists them)")
    try:
        return _apply(console, [known[name] for name in names], state, reason)
    except PermissionDenied:
        console.err(INVALID_USER)
        return 1


def _apply(console: Console, nodes: list[NodeInfo], state: str, reason: str) -> int:
    """Send each node's change; 1 (Slurm's message once) where a RESUME found a node
    with nothing to resume."""
    refused = False
    for node in nodes:
        drained_or_down = node.state in ("DRAIN", "DOWN")
        if not state:  # Reason= alone: the same state, reworded
            if drained_or_down:
                console.client.update_node(node.name, node.state, reason)
            continue
        if state == "UNDRAIN" and node.state != "DRAIN":
            continue
        if state == "RESUME" and not drained_or_down:
            refused = True
            continue
        console.client.update_node(node.name, NODE_STATES[state], reason)
    if refused:
        console.err(INVALID_STATE)
        return 1
    return 0


def _aborted(console: Console, word: str) -> int:
    """Slurm's refusal of a word it cannot read or a key it does not know."""
    console.err(f"Update of this parameter is not supported: {word}")
    console.err("Request aborted")
    return 1


def ping(console: Console) -> int:
    """``scontrol ping``: ``Slurmctld(primary) at HOST is UP``, exit code 0, when the
    server answers (whatever it answers: a refused token is an answer); Slurm's DOWN
    lines, on stdout too, and exit code 1 when it cannot be reached."""
    host = _server_host(console)
    try:
        console.client.whoami()
    except Unavailable:
        console.out(f"Slurmctld(primary) at {host} is DOWN")
        console.out("*****************************************")
        console.out("** RESTORE SLURMCTLD DAEMON TO SERVICE **")
        console.out("*****************************************")
        return 1
    except HalError:
        pass
    console.out(f"Slurmctld(primary) at {host} is UP")
    return 0


def _server_host(console: Console) -> str:
    """The server's host, from ``HAL_URL`` (its first address where it lists several); a
    loopback address is this host's name, as Slurm names a controller on ``localhost``."""
    from hal.client.config import default_server_url  # (the client's, made on first use)

    url = console.environ.get("HAL_URL", "").strip() or default_server_url()
    url = url.split(",", 1)[0].strip()
    host = urlsplit(url).hostname or "localhost"
    if host == "localhost" or host.startswith("127.") or host == "::1":
        return socket.gethostname()
    return host
