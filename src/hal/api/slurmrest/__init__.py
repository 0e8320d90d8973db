"""A slurmrestd-compatible facade over HAL's own API (``docs/reference/slurmrest.md``).

``/slurm/v0.0.45/...`` (and the same shapes at ``/slurm/v0.0.44/...``, the newest version
the generated Python client on PyPI speaks) answers Slurm REST clients in Slurm's shapes:
the ``meta/errors/warnings`` envelope, no_val number structs, ``job_state`` arrays and the
``exit_code`` struct. It maps requests onto the calls HAL's ``/v1`` routes make
(``hal.state.cluster``) and never owns state of its own.

Modules: ``envelope`` (the envelope, Slurm's error numbers), ``desc`` (``job_desc_msg``
→ ``hal.wire`` submission/update), ``views`` (HAL's views → Slurm's ``job_info``, node,
partition), ``routes`` (the mounted application and its routes). ``job_info``, ``meta``,
the versions and no_val numbers are ``hal.wire.slurm_json``'s, which ``squeue --json``
writes too.

It may import ``hal.api``'s context, conversion and auth, ``hal.state``, ``hal.core`` and
``hal.wire``; nothing outside ``hal.api`` imports it but ``hal.api.app``.
"""

from __future__ import annotations

from fastapi import FastAPI

from hal.server.services import Services
from hal.wire.slurm_json import V44, V45


def install(app: FastAPI, ctx: Services) -> None:
    """Mount the facade at ``/slurm/v0.0.45`` and ``/slurm/v0.0.44`` (on by default: it
    is HAL's API in other shapes, behind the same tokens)."""
    from hal.api.slurmrest.routes import create_facade

    for version in (V45, V44):
        app.mount(f"/slurm/{version.data_parser}", create_facade(ctx, app, version))
