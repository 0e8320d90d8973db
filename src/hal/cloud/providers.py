"""A group's provider, by the name its ``[[cloud.groups]]`` entry gives."""

from __future__ import annotations

from pathlib import Path

from hal.cloud.provider import Provider
from hal.core.node_groups import NodeGroup


def make_provider(group: NodeGroup, cluster: str, state_dir: Path) -> Provider:
    """``state_dir``: the server's folder for the provider's own records (the local
    provider's processes); checks the group's provider settings (InvalidRequest)."""
    if group.provider == "local":
        from hal.cloud.local import LocalProvider

        return LocalProvider(group, cluster, state_dir / group.name)
    if group.provider == "lambda":
        from hal.cloud.lambda_cloud import LambdaProvider

        return LambdaProvider(group, cluster, state_dir=state_dir / group.name)
    from hal.cloud.ec2 import Ec2Provider  # boto3: loaded only where a group uses EC2

    return Ec2Provider(group, cluster)
