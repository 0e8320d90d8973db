"""``GET /v1/associations``: hal.toml's accounts, user associations and QoS, as
``sacctmgr show`` lists them. Read-only here: they change with hal.toml, at a start or
at ``scontrol reconfigure``."""

from __future__ import annotations

from collections.abc import Container

from hal.api.limits import tres_info
from hal.config.model import HalConfig
from hal.core.priority import DEFAULT_QOS, ROOT_ACCOUNT, Account, Qos
from hal.wire.accounts import AccountRecord, AssociationList, QosRecord, UserAssociation


def _account(a: Account) -> AccountRecord:
    return AccountRecord(
        name=a.name,
        parent=a.parent,
        shares=a.shares,
        max_jobs=a.max_jobs,
        grp_jobs=a.grp_jobs,
        max_submit_jobs=a.max_submit_jobs,
        grp_submit_jobs=a.grp_submit_jobs,
        grp_tres=tres_info(a.grp_tres),
        max_tres_per_job=tres_info(a.max_tres_per_job),
        max_wall_seconds=a.max_wall_s,
        cohort=a.cohort,
    )


def _qos(q: Qos, default_grace_s: float) -> QosRecord:
    return QosRecord(
        name=q.name,
        priority=q.priority,
        max_jobs_per_user=q.max_jobs_per_user,
        max_submit_jobs_per_user=q.max_submit_jobs_per_user,
        max_wall_seconds=q.max_wall_s,
        max_tres_per_job=tres_info(q.max_tres_per_job),
        grp_tres=tres_info(q.grp_tres),
        grp_jobs=q.grp_jobs,
        preempt=list(q.preempt),
        preempt_mode=q.preempt_mode,
        grace_time_seconds=default_grace_s if q.grace_time_s is None else q.grace_time_s,
    )


def association_list(config: HalConfig, admins: Container[str]) -> AssociationList:
    """Root (1 share, as Slurm's root association) and the configured accounts; the
    ``[[users]]`` associations; the ``[[qos]]`` list, with ``normal`` first when it is
    not listed (it exists whether listed or not: the QoS of a job that names none)."""
    policy = config.priority
    grace = config.preemption.grace_time_s
    qos = [_qos(q, grace) for q in policy.qos]
    if all(q.name != DEFAULT_QOS for q in policy.qos):
        qos.insert(0, _qos(Qos(DEFAULT_QOS), grace))
    return AssociationList(
        cluster=config.cluster_name,
        accounts=[
            AccountRecord(name=ROOT_ACCOUNT, parent="", shares=1),
            *(_account(a) for a in policy.accounts),
        ],
        users=[
            UserAssociation(
                user=u.user,
                account=u.account,
                shares=u.shares,
                default=u.default,
                admin=u.user in admins,
            )
            for u in policy.users
        ],
        qos=qos,
    )
