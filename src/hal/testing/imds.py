"""The EC2 instance metadata stand-in for tests (``hal.cloud.imds``, where the local
provider's spot groups take it from): ``ImdsStandIn`` serves the IMDSv2 token and the
spot ``instance-action``, ``termination-time`` and rebalance paths, and a test injects
notices with ``interrupt()`` / ``rebalance()`` or ``POST /hal/interrupt?in=SECONDS``."""

from __future__ import annotations

from hal.cloud.imds import NOTICE_AHEAD_S, ImdsStandIn, ec2_time

__all__ = ["NOTICE_AHEAD_S", "ImdsStandIn", "ec2_time"]
