"""``Admission``: what a job must pass to enter the queue, and to be changed while it
waits — against the cluster as it is now: its partitions (known, taking jobs), time limit,
array size, QoS and account, node lists, features, GPU types and sizes against the
partitions' nodes, licenses, reservations, topology levels, submit limits, dependency
targets, ``--near``/``--apart`` levels and targets, and what only an administrator may
ask (``for_caller``).

The other checks a submission meets come before, at the HTTP edge, and are about its
shape, not the cluster: the wire schemas' bounds (``hal.wire.bounds``: numbers that fit
the database, no NUL characters) and the parsing of Slurm's syntax into a ``JobSpec``
(``hal.api.convert.to_spec``). Everything that reads the cluster is here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hal.core.errors import Conflict, InvalidRequest, PermissionDenied
from hal.core.job import JobSpec
from hal.core.node import Node, Partition, gpu_type_matches, gpu_type_name
from hal.core.priority import DEFAULT_QOS, SUBMIT_LIMIT_MESSAGE
from hal.state import reservations as advance_reservations
from hal.state.associations import Associations
from hal.state.job_changes import basic_priority, check_time_min
from hal.state.job_rules import check_rule_levels, check_rule_targets
from hal.state.submit_limits import AccountSubmitLimits
from hal.state.topology_levels import check_topology_level

if TYPE_CHECKING:
    from hal.state.cluster import Caller
    from hal.state.mirror import Mirror


class Admission:
    """The admission checks over ``mirror`` with its configuration as it is when made
    (the cluster makes a new one at every reconfigure)."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        # partition name → (what it was made of, its candidate nodes): ``_candidates``
        self._kept_candidates: dict[str, tuple[int, Partition, Mapping[str, Node], list[Node]]] = {}
        # the QoS and accounts jobs may name (``hal.state.associations``)
        self.associations = Associations(mirror.config.priority)
        self._latency_qos = {q.name for q in mirror.config.priority.qos if q.latency_sensitive}

    def with_defaults(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the account and QoS a job naming none is charged to, stored
        with it (Slurm's), latency-sensitive where that QoS is (``[[qos]]
        latency_sensitive``)."""
        spec = self.associations.with_defaults(spec)
        if not spec.latency_sensitive and spec.qos in self._latency_qos:
            spec = spec.with_changes(latency_sensitive=True)
        return spec

    def admit(self, spec: JobSpec, index: int | None) -> tuple[str, int, int]:
        """Resolve the partition, time limit and priority; reject what can never run."""
        where = f"jobs[{index}]." if index is not None else ""
        names = spec.partitions or (self.mirror.default_partition(),)
        for name in names:
            if name not in self.mirror.partitions:
                raise InvalidRequest(
                    f"Invalid partition name specified: {name!r} (known: "
                    f"{', '.join(sorted(self.mirror.partitions))})",
                    field=where + "partition",
                )
        if not any(self.mirror.partitions[name].state.takes_jobs for name in names):
            # DRAIN or INACTIVE (Slurm 22.05.8's words; with -p a,b, when none takes it)
            states = ", ".join(f"{n} is {self.mirror.partitions[n].state}" for n in names)
            raise Conflict(
                f"Required partition not available (inactive or drain): {states}; submit "
                "to another partition (-p), or ask an administrator to set it UP",
                field=where + "partition",
            )
        # queued in the first of its partitions (``hal.core.partition_list``)
        partition = self.mirror.partitions[names[0]]
        if spec.time_limit_s is None:
            limit = self.associations.time_limit(spec, partition.default_limit_s)
        else:
            limit = spec.time_limit_s
        if spec.array is not None and len(spec.array.indices) > self.mirror.config.max_array_size:
            raise InvalidRequest(
                f"array has {len(spec.array.indices)} tasks; MaxArraySize is "
                f"{self.mirror.config.max_array_size}",
                field=where + "array",
            )
        self.check_request(spec, names, where)
        check_time_min(spec.time_min_s, limit, where)
        advance_reservations.check_job(self.mirror, spec, limit, where)
        if spec.topology is not None:
            check_topology_level(self.mirror, spec.topology, where)
        check_rule_levels(self.mirror, spec, where)
        self._check_licenses(spec, where)
        if spec.priority is not None:  # --priority, an administrator's (the API drops a user's)
            return partition.name, limit, spec.priority
        return partition.name, limit, basic_priority(partition, spec.nice)

    def check_request(self, spec: JobSpec, partitions: Sequence[str], where: str = "") -> None:
        """The submit checks of what ``scontrol update`` may change in a pending job
        (``hal.state.pending_update``): its QoS and account, its node lists and features
        against ``partitions``."""
        self.associations.check(spec, where)
        both = [n for n in spec.nodelist if n in spec.exclude]
        if both:  # Slurm: "Job's required and excluded node lists overlap"
            raise InvalidRequest(
                f"Invalid node name specified: {', '.join(both[:5])} both required "
                "(--nodelist) and excluded (--exclude)",
                field=where + "nodelist",
            )
        self.fits_a_partition(spec, partitions, where)

    def _check_licenses(self, spec: JobSpec, where: str) -> None:
        """``-L``: licenses the cluster has (``[licenses]``), no more than it has; Slurm
        refuses the others at submit ("Invalid license specification")."""
        have = self.mirror.config.licenses
        for name, count in spec.licenses:
            if count > have.get(name, 0):
                known = ", ".join(f"{n}:{c}" for n, c in sorted(have.items())) or "none"
                what = (
                    f"the cluster has {have[name]}"
                    if name in have
                    else "no such license is configured"
                )
                raise InvalidRequest(
                    f"Invalid license specification: {name}:{count} ({what}; the "
                    f"cluster's licenses: {known}; see scontrol show licenses)",
                    field=where + "licenses",
                )

    def check_submit_limits(
        self, specs: Sequence[JobSpec], moved: frozenset[int] = frozenset()
    ) -> None:
        """A QoS's ``max_submit_jobs_per_user`` (Slurm's MaxSubmitJobsPerUser): the
        user's pending and running jobs in the QoS, with this batch (each array element
        counts), may not exceed it; the whole batch is refused with Slurm's message.
        Then the accounts' ``max_submit_jobs`` and ``grp_submit_jobs`` (MaxSubmitJobs,
        GrpSubmitJobs; ``hal.state.submit_limits``), likewise. ``moved``: the ids of
        jobs whose QoS or account ``specs`` change (``scontrol update``), not counted
        as they are."""
        self._check_qos_submit_limits(specs, moved)
        if any(a.has_submit_limits for a in self.mirror.config.priority.accounts):
            others = (j for j in self.mirror.unfinished.values() if j.id not in moved)
            i = AccountSubmitLimits(self.mirror.config.priority).first_over(others, specs)
            if i is not None:
                where = f"jobs[{i}]." if len(specs) > 1 else ""
                raise InvalidRequest(SUBMIT_LIMIT_MESSAGE, field=where + "account")

    def _check_qos_submit_limits(self, specs: Sequence[JobSpec], moved: frozenset[int]) -> None:
        caps = {
            q.name: q.max_submit_jobs_per_user
            for q in self.mirror.config.priority.qos
            if q.max_submit_jobs_per_user is not None
        }
        if not caps:
            return
        counts: Counter[tuple[str, str]] = Counter(
            (j.spec.qos or DEFAULT_QOS, j.spec.user)
            for j in self.mirror.jobs.values()
            if not j.state.is_terminal and j.id not in moved
        )
        for i, spec in enumerate(specs):
            key = (spec.qos or DEFAULT_QOS, spec.user)
            cap = caps.get(key[0])
            if cap is None:
                continue
            counts[key] += len(spec.array.indices) if spec.array else 1
            if counts[key] > cap:
                where = f"jobs[{i}]." if len(specs) > 1 else ""
                raise InvalidRequest(SUBMIT_LIMIT_MESSAGE, field=where + "qos")

    def fits_a_partition(self, spec: JobSpec, names: Sequence[str], where: str) -> None:
        """The job's nodes, GPU type and size against each of its partitions' nodes
        known now, not at all while one of them has none (nodes may join later). A job
        naming several partitions (``-p a,b``) is refused only when none could hold it,
        with its first partition's reason."""
        refused: InvalidRequest | None = None
        for name in names:
            partition = self.mirror.partitions[name]
            candidates = self._candidates(partition)
            if not candidates:
                return
            try:
                self._check_nodelist(spec, where)
                self._check_gpu_type(spec, candidates, where)
                self._check_fits_somewhere(spec, candidates, where)
                self._check_required_nodes(spec, partition, where)
            except InvalidRequest as err:
                refused = refused or err
                continue
            return
        if refused is not None:
            raise refused

    def _candidates(self, partition: Partition) -> list[Node]:
        """``partition``'s nodes known now and its [cloud] nodes yet to be made, kept
        while the nodes, the partition and the templates stay the same objects (a batch
        of 1,000 jobs on 10,000 nodes listed them a thousand times)."""
        mirror = self.mirror
        version, templates = mirror.nodes.version, mirror.cloud_templates
        kept = self._kept_candidates.get(partition.name)
        if (
            kept is not None
            and kept[0] == version
            and kept[1] is partition
            and kept[2] is templates
        ):
            return kept[3]
        candidates = [n for n in mirror.nodes.values() if partition.contains(n.name)]
        candidates += [
            t
            for name, t in mirror.cloud_templates.items()
            if name not in mirror.nodes and partition.contains(name)
        ]
        self._kept_candidates[partition.name] = (version, partition, templates, candidates)
        return candidates

    def _check_nodelist(self, spec: JobSpec, where: str) -> None:
        """``--nodelist`` and ``--exclude`` may name only nodes the cluster knows
        (registered, or named by a partition of the config and yet to join), as Slurm's
        nodes must be in its config: an unknown name, or a host list sent unexpanded over
        REST (``n[1-4]``), would otherwise leave the job pending on BadConstraints for ever
        (``--nodelist``) or exclude nothing the user meant (``--exclude``). Checked, like
        the counts, only once the partition has nodes."""
        if not spec.nodelist and not spec.exclude:
            return
        configured = {n for p in self.mirror.partitions.values() for n in p.nodes}
        configured.update(self.mirror.cloud_templates)
        for field, names in (("nodelist", spec.nodelist), ("exclude", spec.exclude)):
            unknown = [n for n in names if n not in self.mirror.nodes and n not in configured]
            if unknown:
                raise InvalidRequest(
                    f"Invalid node name specified: {', '.join(unknown[:5])} "
                    f"(`hal sinfo -N` lists the nodes; a REST client sends names, not host "
                    f"lists like n[1-4])",
                    field=where + field,
                )

    def _check_required_nodes(self, spec: JobSpec, partition: Partition, where: str) -> None:
        """Each registered ``--nodelist`` node must be one the job can run on in
        ``partition``, as the scheduler's noderesources PreFilter requires (else it keeps
        the job pending on BadConstraints for ever): in the partition, with the
        ``--constraint`` features and GPU type, and big enough when the job spreads over
        as many nodes as it may have."""
        count = max(spec.nodes_max, spec.nodes_min, len(spec.nodelist))
        for name in spec.nodelist:
            node = self.mirror.nodes.get(name)
            if node is None:
                continue  # configured, yet to join
            problem = ""
            want = spec.request_per_node(count, node.resources.memory_bytes)
            missing = [f for f in spec.constraint if f not in node.features]
            if not (partition.contains(name) or partition.name in node.partitions):
                problem = f"node {name} is not in partition {partition.name}"
            elif missing:
                problem = f"node {name} lacks features {','.join(missing)}"
            elif spec.typed_gpus and not gpu_type_matches(spec.typed_gpus, node.gpu_model):
                problem = f"node {name} has no GPUs of type {spec.typed_gpus!r}"
            elif not want.fits_in(node.resources):
                have = node.resources
                problem = (
                    f"node {name} has {have.cpus} CPUs, {have.memory_bytes // (1024 * 1024)} "
                    f"MiB and {have.gpus} GPUs; each node would need {want.cpus} CPUs, "
                    f"{want.memory_bytes // (1024 * 1024)} MiB and {want.gpus} GPUs"
                )
            if problem:
                raise InvalidRequest(
                    f"Requested node configuration is not available: {problem} (--nodelist)",
                    field=where + "nodelist",
                )

    def _check_gpu_type(self, spec: JobSpec, nodes: list[Node], where: str) -> None:
        """A job asking GPUs of a type (``--gres=gpu:TYPE:N``, ``--gpus=TYPE:N``) needs a
        node of the partition whose GPU model is of that type, as the scheduler's filter
        matches it (``hal.core.node.gpu_type_matches``). Like the counts in
        ``_check_fits_somewhere`` it is checked against the partition's nodes known now,
        and not at all while the partition has none (nodes may join later)."""
        wanted = spec.typed_gpus
        if wanted is None:
            return
        if any(gpu_type_matches(wanted, n.gpu_model) for n in nodes):
            return
        here = sorted(
            {gpu_type_name(n.gpu_model) for n in nodes if n.gpu_model and n.resources.gpus}
        )
        known = [*self.mirror.nodes.values(), *self.mirror.cloud_templates.values()]
        gpu_nodes = [n for n in known if n.gpu_model and n.resources.gpus]
        anywhere = sorted({gpu_type_name(n.gpu_model) for n in gpu_nodes})
        if any(gpu_type_matches(wanted, n.gpu_model) for n in gpu_nodes):
            # on nodes, but not this partition's
            raise InvalidRequest(
                f"Requested node configuration is not available: no node of the partition "
                f"has GPU type {wanted!r} (its types: {', '.join(here) or 'none'})",
                field=where + "gpu_type",
            )
        raise InvalidRequest(
            f"Invalid generic resource (gres) specification: no node has GPU type {wanted!r} "
            f"(the cluster's types: {', '.join(anywhere) or 'none'})",
            field=where + "gpu_type",
        )

    @staticmethod
    def _check_fits_somewhere(spec: JobSpec, nodes: list[Node], where: str) -> None:
        typed = ""
        if spec.typed_gpus is not None:
            # only the nodes with GPUs of the type can hold it (``_check_gpu_type``: some do)
            nodes = [n for n in nodes if gpu_type_matches(spec.typed_gpus, n.gpu_model)]
            typed = f" with GPU type {spec.typed_gpus!r}"
        if spec.nodes_min > len(nodes):
            raise InvalidRequest(
                f"Requested node configuration is not available: {spec.nodes_min} nodes "
                f"asked for, the partition has {len(nodes)}{typed}",
                field=where + "nodes",
            )
        wanted = set(spec.constraint)
        unknown = sorted(wanted - {f for n in nodes for f in n.features}) if wanted else []
        if unknown:  # (Slurm's words; a size message would hide the reason)
            known = sorted({f for n in nodes for f in n.features})
            raise InvalidRequest(
                f"Invalid feature specification: no node of the partition has "
                f"{', '.join(unknown)} (its nodes' features: {', '.join(known) or 'none'})",
                field=where + "constraint",
            )

        def fit(count: int) -> bool:
            """Whether ``count`` of the nodes could each hold a ``count``-node share
            (stops at the ``count``-th: most jobs fit the first node or so)."""
            found = 0
            for n in nodes:
                if spec.request_per_node(count, n.resources.memory_bytes).fits_in(
                    n.resources
                ) and wanted.issubset(n.features):
                    found += 1
                    if found >= count:
                        return True
            return False

        # a range (-N 1-2, or no -N: up to a node per task) fits if one count in it does
        counts = range(spec.nodes_min, min(max(spec.nodes_max, spec.nodes_min), len(nodes)) + 1)
        if not any(fit(count) for count in counts):
            biggest = max(nodes, key=lambda n: (n.resources.cpus, n.resources.memory_bytes))
            most = max(counts, default=spec.nodes_min)  # (spread the widest it may be)
            want = spec.request_per_node(most, biggest.resources.memory_bytes)
            raise InvalidRequest(
                "Requested node configuration is not available: each node would need "
                f"{want.cpus} CPUs, {want.memory_bytes // (1024 * 1024)} MiB and {want.gpus} "
                f"GPUs; the largest node{typed} has {biggest.resources.cpus} CPUs, "
                f"{biggest.resources.memory_bytes // (1024 * 1024)} MiB and "
                f"{biggest.resources.gpus} GPUs",
                field=where + "resources",
            )

    @staticmethod
    def check_dependency_targets(spec: JobSpec, known: set[int], index: int | None) -> None:
        if spec.dependency is None:
            return
        for term in spec.dependency.terms:
            for jid in term.job_ids:
                if jid not in known:
                    where = f"jobs[{index}]." if index is not None else ""
                    raise InvalidRequest(
                        f"Job dependency problem: job {jid} does not exist",
                        field=where + "dependency",
                    )

    def for_caller(self, spec: JobSpec, caller: Caller, where: str = "") -> JobSpec:
        """``spec`` as ``caller`` may submit it. A negative nice raises a job's priority
        above everyone's: administrators only (as in Slurm, and as for ``scontrol update
        Nice=``). A ``--priority`` is an administrator's to give: Slurm 22.05.8 drops a plain
        user's without a word, the job getting the priority it would have had
        (docs/slurm-checks.md), and so does HAL. ``--near``/``--apart`` name
        live jobs, another user's only for an administrator (``hal.state.job_rules``)."""
        if spec.near or spec.apart:
            check_rule_targets(self.mirror, spec, caller, where)
        if spec.nice < 0 and not caller.admin:
            raise PermissionDenied(
                f"{where}nice: only an administrator may give a negative nice (it raises the "
                "job's priority over other users' jobs); use 0 or more"
            )
        if spec.priority is not None and not caller.admin:
            return spec.with_changes(priority=None)
        return spec
