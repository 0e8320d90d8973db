"""Preemption by QoS or partition priority tier (PostFilter). See README.md."""

from hal.scheduler.plugins.preemption.preemption import NAME, Preempt, new, standing

__all__ = ["NAME", "Preempt", "new", "standing"]
