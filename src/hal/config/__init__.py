"""The cluster configuration file (TOML) and its validation.

Owns ``HalConfig``; imports only ``hal.core``. An invalid file fails at start-up with a
message naming the field.
"""

from hal.config.model import HalConfig, PartitionConfig, load_config

__all__ = ["HalConfig", "PartitionConfig", "load_config"]
