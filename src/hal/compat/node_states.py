"""How sinfo and scontrol name a node's state, and sinfo's ``-t`` filter.

A node has a base state (``NodeInfo.display_state``: idle, mix, alloc, drain, drng, down)
and flags (``NodeInfo.state_flags``, the server's ``state/node_flags.py``). As Slurm's
``node_state_string_compact``, one flag shows as a suffix, maintenance first:

- ``$`` in a maintenance reservation open now; an idle node shows ``maint`` instead;
- ``#`` a ``[cloud]`` group's node powering up (its instance boots);
- ``%`` one powering down (its instance is being removed);
- ``!`` an owned node whose power-down was requested (``[power]``), jobs still on it;
- ``~`` one powered down (not created; an owned node asleep);
- ``*`` not responding (its agent missed heartbeats; ``down*`` once declared down; a
  node powering up is not responding too, and shows ``idle#``);
- an idle node in another reservation open now shows ``resv``.

A registered group node has the ``CLOUD`` flag alone, which shows no suffix. A DOWN
node with the ``DRAIN`` flag (drained, then set down) shows as drained: ``drain``,
``drained``, ``State=DOWN+DRAIN``.
``%t`` and ``%T`` (``StateCompact``/``StateLong``) carry the suffix alike (``idle*``,
``allocated$``, ``mixed#``). A suffix does not change the base state: ``sinfo -t idle``
lists ``idle*`` and ``idle~`` nodes, ``-t no_respond`` only those not responding,
``-t maint`` / ``-t resv`` the nodes in reservations (a maintenance one is reserved too),
``-t cloud`` the groups' nodes, ``-t powered_down`` / ``powering_up`` / ``powering_down``
those so (Slurm 22.05.8).

``-t`` matches Slurm's base states, with drain as a flag on top (``node_tags``; checked
on Slurm 22.05.8, docs/slurm-checks.md): a drained idle node is ``idle``,
``drain`` and ``drained``; a draining one ``alloc``, ``drain`` and ``draining`` (not
``mix``); a mixed one ``mix`` and ``alloc``; a down drained one ``down``, ``drain`` and
``drained``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.nodes import NodeInfo

NOT_RESPONDING = "NOT_RESPONDING"
MAINTENANCE = "MAINTENANCE"
RESERVED = "RESERVED"
DRAIN = "DRAIN"
CLOUD = "CLOUD"
POWERED_DOWN = "POWERED_DOWN"
POWERING_UP = "POWERING_UP"
POWERING_DOWN = "POWERING_DOWN"
POWER_DOWN = "POWER_DOWN"
# the power flags' suffixes, in Slurm's order of precedence (after maintenance's ``$``,
# before not responding's ``*``)
POWER_SUFFIXES = (
    (POWERING_UP, "#"),
    (POWERING_DOWN, "%"),
    (POWER_DOWN, "!"),
    (POWERED_DOWN, "~"),
)
# -t names of flags: the tag a node with the flag gets (``node_tags``)
FLAG_TAGS = {
    NOT_RESPONDING: "no_respond",
    MAINTENANCE: "maint",
    RESERVED: "resv",
    CLOUD: "cloud",
    POWERED_DOWN: "powered_down",
    POWERING_UP: "powering_up",
    POWERING_DOWN: "powering_down",
    POWER_DOWN: "power_down",
}

LONG_STATES = {
    "idle": "idle",
    "alloc": "allocated",
    "mix": "mixed",
    "drain": "drained",
    "drng": "draining",
    "down": "down",
    "comp": "completing",
    "resv": "reserved",
    "maint": "maint",
    "fail": "fail",
}

# a node's tags by its base state (``NodeInfo.display_state``): what ``-t`` names match
# on it, as Slurm 22.05.8's sinfo matches them (a down node with the DRAIN flag adds
# ``drain`` and ``drained``: ``node_tags``)
BASE_TAGS: dict[str, frozenset[str]] = {
    "idle": frozenset({"idle"}),
    "mix": frozenset({"mix", "alloc"}),
    "alloc": frozenset({"alloc"}),
    "drain": frozenset({"idle", "drain", "drained"}),
    "drng": frozenset({"alloc", "drain", "draining"}),
    "down": frozenset({"down"}),
    "comp": frozenset({"comp"}),
    "fail": frozenset({"fail"}),
}

# -t: Slurm's node state names (short and long, any case) → the tags (``node_tags``) they
# match. Names of states HAL never shows are accepted and match nothing, as on a cluster
# without such nodes.
STATE_FILTERS: dict[str, frozenset[str]] = {
    **{
        name: frozenset({tag})
        for tag, names in (
            ("idle", ("idle",)), ("mix", ("mix", "mixed")), ("alloc", ("alloc", "allocated")),
            ("drain", ("drain",)), ("drained", ("drained",)), ("draining", ("drng", "draining")),
            ("down", ("down",)), ("comp", ("comp", "completing")), ("fail", ("fail",)),
            ("resv", ("resv", "reserved")), ("maint", ("maint",)),
        )
        for name in names
    },
    "maintenance": frozenset({"maint"}),
    "no_respond": frozenset({"no_respond"}),
    "not_responding": frozenset({"no_respond"}),
    **{name: frozenset({name}) for name in ("cloud", "powered_down", "powering_up",
                                            "powering_down", "power_down")},
    "pow_dn": frozenset({"power_down"}),
    **{
        name: frozenset()
        for name in (
            "boot", "booting", "failing", "future", "futr", "inval", "invalid",
            "npc", "perfctrs", "planned", "pow_up", "reboot",
            "reboot_issued", "reboot_requested", "unk", "unknown", "blocked",
        )
    },
}  # fmt: skip


def state_compact(node: NodeInfo) -> str:
    """sinfo's ``%t``: ``idle``, ``idle*``, ``alloc$``, ``maint``, ``resv`` ..."""
    return _state(node, node.display_state)


def state_long(node: NodeInfo) -> str:
    """sinfo's ``%T``: ``idle*``, ``allocated$``, ``drained*`` ..."""
    return _state(node, LONG_STATES.get(node.display_state, node.display_state), long=True)


def _state(node: NodeInfo, base: str, *, long: bool = False) -> str:
    flags = set(node.state_flags)
    star = "*" if NOT_RESPONDING in flags else ""
    power = next((mark for flag, mark in POWER_SUFFIXES if flag in flags), "")
    if node.display_state == "down" and DRAIN in flags:  # DOWN+DRAIN: drained, as Slurm's
        base = LONG_STATES["drain"] if long else "drain"
    if node.display_state == "idle":
        if MAINTENANCE in flags:
            return "maint" + star
        if power or star:
            return base + (power or star)
        if RESERVED in flags:
            return "reserved" if long else "resv"
        return base
    if MAINTENANCE in flags:
        return base + "$"
    return base + (power or star)


# Slurm's node state numbers (slurm.h): the base state and the flags on top of it
_SLURM_BASE = {"down": 1, "idle": 2, "alloc": 3, "mix": 5, "comp": 3 | 0x400, "fail": 2 | 0x2000}
_SLURM_FLAGS = {
    RESERVED: 0x20,
    CLOUD: 0x80,
    NOT_RESPONDING: 0x800,
    POWERED_DOWN: 0x1000,
    POWERING_UP: 0x4000,
    MAINTENANCE: 0x8000,
    POWERING_DOWN: 0x40000,
    POWER_DOWN: 0x800000,
    DRAIN: 0x200,
}
_DRAIN = _SLURM_FLAGS[DRAIN]


def slurm_state_number(node: NodeInfo) -> int:
    """The number Slurm keeps for this node's state (``MIXED+DRAIN`` is 0x205): sinfo's
    default sort ``-t`` puts the highest first (draining, drained, down ...)."""
    state = node.display_state
    if state == "drng":
        number = (3 if node.cpus_alloc >= node.cpus else 5) | _DRAIN
    elif state == "drain":
        number = 2 | _DRAIN
    else:
        number = _SLURM_BASE.get(state, 0)
    for flag in node.state_flags:
        number |= _SLURM_FLAGS.get(flag, 0)
    return number


# scontrol's base states (Slurm's node_state_string_complete); a drained node is its base
# state with the DRAIN flag: ``IDLE+DRAIN``, ``MIXED+DRAIN`` while its jobs run (Slurm
# 22.05.8)
_SCONTROL_BASE = {"alloc": "ALLOCATED", "mix": "MIXED", "drain": "IDLE"}
_DRAINED = ("drain", "drng")


def scontrol_state(node: NodeInfo) -> str:
    """``scontrol show node``'s ``State=``: ``IDLE``, ``IDLE+DRAIN``,
    ``MIXED+DRAIN+NOT_RESPONDING``, ``IDLE+CLOUD+POWERED_DOWN``,
    ``MIXED+CLOUD+DRAIN``: the base state, then DRAIN and the flags in Slurm's order
    (alphabetical: CLOUD, DRAIN, MAINTENANCE, NOT_RESPONDING, POWERED_DOWN,
    POWERING_DOWN, POWERING_UP, RESERVED)."""
    if node.display_state == "drng":
        state = "ALLOCATED" if node.cpus_alloc >= node.cpus else "MIXED"
    else:
        state = _SCONTROL_BASE.get(node.display_state, node.display_state.upper())
    flags = set(node.state_flags) | ({"DRAIN"} if node.display_state in _DRAINED else set())
    return state + "".join("+" + flag for flag in sorted(flags))


def node_tags(node: NodeInfo) -> frozenset[str]:
    """What ``-t`` names match on this node: its base state's tags and one per flag."""
    tags = set(BASE_TAGS.get(node.display_state, {node.display_state}))
    tags.update(FLAG_TAGS[flag] for flag in node.state_flags if flag in FLAG_TAGS)
    if DRAIN in node.state_flags:
        tags.update(("drain", "drained"))
    return frozenset(tags)


def parse_node_states(text: str) -> list[list[frozenset[str]]] | None:
    """``-t``: state names, comma-separated, any case → alternatives, each a list of tag
    sets that must all meet the node's tags (``idle&no_respond``: idle nodes not
    responding). ``all`` is no filter (None). A name Slurm does not have is a
    ``ValueError``, not a silent empty list."""
    choices: list[list[frozenset[str]]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item.lower() == "all":
            return None
        terms: list[frozenset[str]] = []
        for name in item.lower().split("&"):
            states = STATE_FILTERS.get(name.strip())
            if states is None:
                raise ValueError(
                    f"Invalid node state specified: {name.strip()}; use idle, alloc, mix, "
                    "drain, drng, down, comp, resv, maint, no_respond, fail, cloud, "
                    "powered_down, powering_up, powering_down (or their long names), "
                    "comma-separated, or all"
                )
            terms.append(states)
        choices.append(terms)
    return choices


def state_matches(node: NodeInfo, choices: list[list[frozenset[str]]]) -> bool:
    tags = node_tags(node)
    return any(all(tags & term for term in terms) for terms in choices)
