"""The compute control plane: providers create and remove nodes (local processes, EC2
instances); the autoscaler turns waiting jobs into the cheapest set of new nodes and
removes idle ones. See docs/admin/cloud.md and ADR 0019."""
