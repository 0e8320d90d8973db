"""Hold a job until its dependency holds; end it if the dependency never can (when asked).

Each ``kind:id`` pair is one condition (``afterok:5:6`` is two); the job's ``,``/``?``
joins all of them, as in Slurm. A condition is MET, WAITING or NEVER (can no longer be
met). With ``,`` one NEVER makes the whole NEVER; with ``?`` only all NEVER does.

Targets are read from ``snapshot.related``; an id missing there is a job the store does
not know, which can never satisfy anything. An array job's id (``afterok:ARRAY``) stands
for all its elements, as in Slurm: the condition is met when every element meets it
(``afternotok``: when all have ended and one failed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from enum import Enum

from hal.core.job import Allocation, DependencyKind, Job
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import PreFilterPlugin, PreFilterWaiver, ReservePlugin
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.status import SUCCESS, Code, Status, unschedulable

NAME = "dependency"


class Verdict(Enum):
    MET = "met"
    WAITING = "unfulfilled"
    NEVER = "never"


# (name, user) of every job holding resources (singleton); built only when a singleton
# is judged: counting the running jobs at every placement cost 2 % of a simulated pass.
ACTIVE_NAMES: StateKey[Counter[tuple[str, str]]] = StateKey("dependency.active_names")
# (name, user) → jobs placed earlier this pass (minus those unreserved).
PLACED_NAMES: StateKey[dict[tuple[str, str], int]] = StateKey("dependency.placed_names")
# (array_job_id, array_task_id) → element, over snapshot.related (aftercorr).
ELEMENTS: StateKey[dict[tuple[int, int], Job]] = StateKey("dependency.related_elements")
# array_job_id → its elements in snapshot.related (a dependency on the array's id).
ARRAYS: StateKey[dict[int, list[Job]]] = StateKey("dependency.related_arrays")

_SINGLETON_STATES = (JobState.RUNNING, JobState.SUSPENDED)


def _ok(target: Job) -> bool:
    return target.state is JobState.COMPLETED and target.exit_code == 0


def judge(kind: DependencyKind, target: Job) -> Verdict:
    """One condition against a known target job."""
    terminal = target.state.is_terminal
    if kind is DependencyKind.AFTER:
        # Started, or will never start (cancelled while pending): either way, go.
        return Verdict.MET if target.state is not JobState.PENDING else Verdict.WAITING
    if kind is DependencyKind.AFTERANY:
        return Verdict.MET if terminal else Verdict.WAITING
    if kind in (DependencyKind.AFTEROK, DependencyKind.AFTERCORR):
        if _ok(target):
            return Verdict.MET
        return Verdict.NEVER if terminal else Verdict.WAITING
    if kind is DependencyKind.AFTERNOTOK:
        if not terminal:
            return Verdict.WAITING
        return Verdict.NEVER if _ok(target) else Verdict.MET
    raise ValueError(f"judge() does not handle {kind}")


def judge_array(kind: DependencyKind, elements: Sequence[Job]) -> Verdict:
    """One condition against a whole array (Slurm: on all of its elements)."""
    if kind is DependencyKind.AFTERNOTOK:
        if not all(e.state.is_terminal for e in elements):
            return Verdict.WAITING
        return Verdict.MET if any(not _ok(e) for e in elements) else Verdict.NEVER
    verdicts = {judge(kind, e) for e in elements}
    if Verdict.NEVER in verdicts:
        return Verdict.NEVER
    return Verdict.WAITING if Verdict.WAITING in verdicts else Verdict.MET


def condition(
    kind: DependencyKind,
    target: Job | None,
    elements: Sequence[Job],
    corresponding: Job | None = None,
) -> Verdict:
    """One ``kind:id`` condition: on the elements of the array ``id`` names (``elements``;
    empty: ``id`` names the one job ``target``, None when no such job is known, which can
    never satisfy anything). ``corresponding`` (aftercorr): the target's element of the
    dependent job's own index, judged alone when there is one."""
    if kind is DependencyKind.AFTERCORR and corresponding is not None:
        return judge(kind, corresponding)
    # aftercorr with no element of our index (or from a job that is no element) is judged
    # on the whole target, like afterok: Slurm's test_job_dependency() falls back to the
    # target array's finished/completed tests when find_job_array_rec() finds no
    # corresponding task. It is never judged on one other element.
    if elements:
        return judge_array(kind, elements)
    return Verdict.NEVER if target is None else judge(kind, target)


class DependencyCheck:
    name = NAME

    def _active_names(self, ctx: PassContext) -> Counter[tuple[str, str]]:
        names = ctx.data.get(ACTIVE_NAMES)
        if names is None:
            names = Counter(
                (r.spec.name, r.spec.user) for r in ctx.running if r.state in _SINGLETON_STATES
            )
            ctx.data.write(ACTIVE_NAMES, names)
        return names

    def _elements(self, ctx: PassContext) -> Mapping[tuple[int, int], Job]:
        elements = ctx.data.get(ELEMENTS)
        if elements is None:
            elements = {
                (j.array_job_id, j.array_task_id): j
                for j in ctx.snapshot.related.values()
                if j.array_job_id is not None and j.array_task_id is not None
            }
            ctx.data.write(ELEMENTS, elements)
        return elements

    def _arrays(self, ctx: PassContext) -> Mapping[int, list[Job]]:
        arrays = ctx.data.get(ARRAYS)
        if arrays is None:
            arrays = {}
            for (array_id, _task), element in self._elements(ctx).items():
                arrays.setdefault(array_id, []).append(element)
            ctx.data.write(ARRAYS, arrays)
        return arrays

    def _condition(
        self, ctx: PassContext, job: Job, kind: DependencyKind, target_id: int, one: bool
    ) -> Verdict:
        """``one``: ``target_id`` names one array element (``afterok:12_0``), not the array
        that has the same id."""
        target = ctx.snapshot.related.get(target_id)
        if one:
            return condition(kind, target, ())
        corresponding = None
        if kind is DependencyKind.AFTERCORR and job.array_task_id is not None:
            corresponding = self._elements(ctx).get((target_id, job.array_task_id))
        return condition(kind, target, self._arrays(ctx).get(target_id, ()), corresponding)

    def lets_through(self, job: Job) -> bool:
        dep = job.spec.dependency
        return dep is None or not dep.terms

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        dep = job.spec.dependency
        if dep is None or not dep.terms:
            return SUCCESS
        verdicts: list[tuple[str, Verdict]] = []
        for term in dep.terms:
            if term.kind is DependencyKind.SINGLETON:
                key = (job.spec.name, job.spec.user)
                placed = ctx.data.get(PLACED_NAMES)
                busy = self._active_names(ctx)[key] > 0 or bool(placed and placed.get(key))
                verdicts.append(("singleton", Verdict.WAITING if busy else Verdict.MET))
                continue
            for target_id in term.job_ids:
                one = target_id in term.elements
                verdict = self._condition(ctx, job, term.kind, target_id, one)
                verdicts.append((f"{term.kind.value}:{target_id}", verdict))
        found = {v for _, v in verdicts}
        if dep.any_of:
            overall = (
                Verdict.MET
                if Verdict.MET in found
                else Verdict.WAITING
                if Verdict.WAITING in found
                else Verdict.NEVER
            )
        else:
            overall = (
                Verdict.NEVER
                if Verdict.NEVER in found
                else Verdict.WAITING
                if Verdict.WAITING in found
                else Verdict.MET
            )
        if overall is Verdict.MET:
            return SUCCESS
        # Slurm's %E shows e.g. "afterok:5(unfulfilled)"; keep that shape in the message.
        detail = ",".join(f"{text}({v.value})" for text, v in verdicts if v is not Verdict.MET)
        if overall is Verdict.WAITING:
            return unschedulable(PendingReason.DEPENDENCY, detail, NAME)
        return Status(
            Code.UNRESOLVABLE,
            PendingReason.DEPENDENCY_NEVER_SATISFIED,
            detail,
            NAME,
            JobState.CANCELLED if job.spec.kill_on_invalid_dep else None,
        )

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        # Any job placed now makes a later singleton with its name and user wait.
        placed = ctx.data.get(PLACED_NAMES)
        if placed is None:
            placed = {}
            ctx.data.write(PLACED_NAMES, placed)
        key = (job.spec.name, job.spec.user)
        placed[key] = placed.get(key, 0) + 1
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        placed = ctx.data.get(PLACED_NAMES)
        key = (job.spec.name, job.spec.user)
        if placed and placed.get(key, 0) > 0:
            placed[key] -= 1


def new(args: PluginArgs) -> DependencyCheck:
    reject_unknown_args(args, ())
    return DependencyCheck()


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = DependencyCheck
_WAIVER: type[PreFilterWaiver] = DependencyCheck
_RESERVE: type[ReservePlugin] = DependencyCheck
