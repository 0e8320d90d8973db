"""Advance reservations: reserved nodes take only their reservation's jobs. See README.md."""

from hal.scheduler.plugins.reservation.plugin import NAME, Reservations, new

__all__ = ["NAME", "Reservations", "new"]
