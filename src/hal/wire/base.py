"""The base of every wire schema."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """``defer_build``: a model's validator is built on first use, not at import, so a CLI
    process that touches two schemas does not pay for all of them (sbatch's 150 ms)."""

    model_config = ConfigDict(defer_build=True)
