"""A submission's way from the wire to ``Cluster.submit``, whichever API it came by
(``/v1/jobs``, its batch and het forms, scrontab, HTC workers, the slurmrest facade)."""

from __future__ import annotations

from collections.abc import Sequence

from hal.api.convert import to_spec
from hal.core.job import JobSpec
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.jobs import JobSubmit


def spec_of(services: Services, body: JobSubmit, user: str, where: str = "") -> JobSpec:
    """One submission validated and resolved with this cluster's settings (the largest
    array, ``[data]``'s datasets, ``[mail] domain``) and its artifacts pinned; errors
    name ``where + field``."""
    config = services.config
    spec = to_spec(
        body,
        user,
        max_array_size=config.max_array_size,
        where=where,
        datasets=config.datasets,
        mail_domain=config.mail.domain,
        element=services.cluster.element_id,
    )
    return services.pin(spec, where)


async def submission(
    services: Services, items: Sequence[JobSubmit], caller: Caller, field: str = ""
) -> list[JobSpec]:
    """What every user's submission goes through before ``Cluster.submit``: each item
    resolved (``spec_of``; with ``field``, errors name ``field[i].``), what only an
    administrator may ask dropped or refused (``Admission.for_caller``), and with ``[data]`` the
    inputs located for the first pass."""
    specs = []
    for i, item in enumerate(items):
        where = f"{field}[{i}]." if field else ""
        specs.append(
            services.cluster.admission.for_caller(
                spec_of(services, item, caller.name, where), caller, where
            )
        )
    await services.prime(specs)
    return specs
