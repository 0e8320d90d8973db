"""Resource quantities. Integers in base units: CPUs, bytes, GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from hal.core.units import GiB as GiB  # noqa: PLC0414  (re-exported: resources' units)
from hal.core.units import MiB as MiB  # noqa: PLC0414


@dataclass(frozen=True, slots=True)
class ResourceVector:
    cpus: int = 0
    memory_bytes: int = 0
    gpus: int = 0

    def __add__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(
            self.cpus + other.cpus,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
        )

    def __sub__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(
            self.cpus - other.cpus,
            self.memory_bytes - other.memory_bytes,
            self.gpus - other.gpus,
        )

    def fits_in(self, other: ResourceVector) -> bool:
        return (
            self.cpus <= other.cpus
            and self.memory_bytes <= other.memory_bytes
            and self.gpus <= other.gpus
        )

    def is_nonnegative(self) -> bool:
        return self.cpus >= 0 and self.memory_bytes >= 0 and self.gpus >= 0


ZERO = ResourceVector()
