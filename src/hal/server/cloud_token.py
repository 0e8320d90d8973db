"""The token ``[cloud]`` nodes join with: the agent user ``CLOUD_AGENT``'s, bound to
the groups' node names (docs/admin/security.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from hal.core.errors import InvalidRequest
from hal.state.cluster import Cluster

CLOUD_AGENT = "hal-cloud"  # the agent user whose token new nodes join with


def bind_nodes(cluster: Cluster, nodes: Sequence[str]) -> None:
    """``CLOUD_AGENT``'s token serves ``nodes`` from now on; with none (no group left)
    it keeps the names it had, for its agent user's empty list would serve every
    node. Blocks."""
    from hal.slurm.syntax import compress_hostlist

    if not nodes:
        return
    hostlist = compress_hostlist(sorted(nodes))
    user = next((u for u in cluster.store.users() if u.name == CLOUD_AGENT), None)
    if user is not None and user.agent_nodes != hostlist:
        with cluster.store.transaction() as tx:
            tx.set_agent_nodes(CLOUD_AGENT, hostlist)


def agent_token(cluster: Cluster, path: Path, nodes: Sequence[str]) -> str:
    """The token of ``CLOUD_AGENT``, bound to the groups' node names (a stolen one serves
    no other node): the one kept in ``path`` while it still is the user's, else a new
    one, written there (mode 0600) before any node is given it."""
    from hal.server.auth import new_token, token_hash
    from hal.server.users import reset_token
    from hal.slurm.syntax import compress_hostlist

    store = cluster.store
    user = next((u for u in store.users() if u.name == CLOUD_AGENT), None)
    if user is not None and not user.agent:
        raise InvalidRequest(
            f"user {CLOUD_AGENT} exists and is no agent, but [cloud] nodes join under that "
            f"name: delete it (`hal user delete {CLOUD_AGENT}`) and start again"
        )
    if user is None:
        token = new_token()
        with store.transaction() as tx:
            tx.add_user(
                CLOUD_AGENT,
                token_hash(token),
                False,
                cluster.clock.now(),
                agent=True,
                agent_nodes=compress_hostlist(sorted(nodes)),
            )
    else:
        bind_nodes(cluster, nodes)  # the groups may have changed since
        with contextlib.suppress(OSError):
            kept = path.read_text().strip()
            found = store.user_by_token_hash(token_hash(kept))
            if found is not None and found.name == CLOUD_AGENT:
                return kept
        token = reset_token(store, CLOUD_AGENT, admin=False)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    return token
