"""``Membership``: a node's place in the cache tree, kept alive and remembered on disk.

At start the node asks the control plane who it is (registering itself if absent), learns
its parent from the answer, then walks up to learn every ancestor's address. That chain is
saved to ``<state-dir>/<instance-id>.json`` so a node restarted while the control plane is
down still knows where to pull misses from.

The heartbeat loop runs at the interval the control plane asks for. A 404 means the control
plane forgot the node (deregistered, or restarted on a fresh database): register again and
send a full inventory. Every ``reconcile_every_s`` a full inventory goes out anyway, and the
chain is refreshed so a re-parented node follows the control plane.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hal.cache.controlclient import ControlPlaneClient, ControlPlaneDown, ControlPlaneRejected

log = logging.getLogger("hal.cache.membership")
MAX_DEPTH = 32


@dataclass(slots=True)
class Registration:
    """What the node tells the control plane about itself when it registers."""

    address: str
    tier: str | None = None
    parent_id: str | None = None
    region: str | None = None
    max_size: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        tier = self.tier or ("leaf" if self.parent_id else "root")
        out: dict[str, Any] = {"address": self.address, "tier": tier}
        if self.parent_id:
            out["parentId"] = self.parent_id
        if self.region:
            out["region"] = self.region
        if self.max_size:
            out["maxSize"] = self.max_size
        if self.metadata:
            out["metadata"] = self.metadata
        return out


class Membership:
    def __init__(
        self,
        client: ControlPlaneClient,
        reg: Registration,
        state_dir: Path | None,
        stats: Callable[[], dict[str, Any]],
        on_forgotten: Callable[[], None],
        reconcile_every_s: float = 30.0,
        on_stale: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.client = client
        self.on_stale = on_stale  # the keys whose copies here the control plane calls stale
        self.reg = reg
        self.state_file = (state_dir / f"{client.instance_id}.json") if state_dir else None
        self.stats = stats
        self.on_forgotten = on_forgotten
        self.reconcile_every_s = reconcile_every_s
        # ancestors, nearest first: (instance id, address)
        self.chain: list[tuple[str, str]] = []
        self.interval_s = 2.0
        self.cp_ok = False
        # False while some ancestor has not registered yet: keep asking until it has
        self.chain_complete = False
        self._load()

    @property
    def ancestor_ids(self) -> set[str]:
        return {iid for iid, _ in self.chain}

    # -- local cache ---------------------------------------------------------------------

    def _load(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            saved = json.loads(self.state_file.read_text())
            if not isinstance(saved, dict):
                raise ValueError("not a JSON object")
            chain = [(str(i), str(a)) for i, a in saved.get("chain", [])]
        except (OSError, ValueError, TypeError) as err:
            log.warning("ignoring unreadable node state %s: %s", self.state_file, err)
            return
        # The node's flags win (a node restarted with another --parent-id moves); without
        # them it takes its place of last time. The saved chain routes pulls while the
        # control plane is away, if it starts from that parent.
        if self.reg.parent_id is None and self.reg.tier is None:
            self.reg.parent_id = saved.get("parentId")
            self.reg.tier = saved.get("tier")
        if saved.get("parentId") == self.reg.parent_id:
            self.chain = chain

    def _save(self) -> None:
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"parentId": self.reg.parent_id, "tier": self.reg.tier, "chain": self.chain})
        )
        os.replace(tmp, self.state_file)

    # -- control plane -------------------------------------------------------------------

    async def join(self) -> None:
        """Register if absent and learn the parent chain. Raises ``ControlPlaneDown``."""
        me = await self.client.get_instance(self.client.instance_id)
        if me is None:
            try:
                await self.client.register(self.reg.body())
            except ControlPlaneRejected as err:
                if err.status != 409:  # 409: someone registered us meanwhile; fine
                    raise
            me = await self.client.get_instance(self.client.instance_id) or {}
        self.reg.parent_id = me.get("parentId")
        self.reg.tier = me.get("tier", self.reg.tier)
        chain: list[tuple[str, str]] = []
        seen = {self.client.instance_id}
        parent = self.reg.parent_id
        complete = True
        while parent and parent not in seen and len(chain) < MAX_DEPTH:
            seen.add(parent)
            info = await self.client.get_instance(parent)
            if info is None:
                complete = False  # the parent has not registered yet; ask again later
                break
            chain.append((parent, str(info.get("address", ""))))
            parent = info.get("parentId")
        self.chain = chain
        self.chain_complete = complete
        self.cp_ok = True
        self._save()

    async def run(self) -> None:
        """Heartbeat forever; re-join after the control plane forgot us."""
        loop = asyncio.get_running_loop()
        last_reconcile = loop.time()
        joined = False
        while True:
            try:
                if not joined or not self.chain_complete:
                    await self.join()
                    joined = True
                ms, stale = await self.client.heartbeat(self.stats())
                if stale and self.on_stale is not None:
                    self.on_stale(stale)
                self.interval_s = max(0.05, ms / 1000)
                if not self.cp_ok:
                    # back after an outage: it may have lost state, so resend everything
                    self.on_forgotten()
                self.cp_ok = True
                if loop.time() - last_reconcile >= self.reconcile_every_s:
                    last_reconcile = loop.time()
                    self.on_forgotten()
                    await self.join()
            except ControlPlaneRejected as err:
                if err.status == 404:
                    log.info("control plane does not know this node; registering again")
                    joined = False
                    self.on_forgotten()
                    continue
                log.error("heartbeat rejected: %s", err)
            except ControlPlaneDown as err:
                if self.cp_ok:
                    log.warning("heartbeat failed: %s", err)
                self.cp_ok = False
            await asyncio.sleep(self.interval_s)
