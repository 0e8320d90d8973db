"""The seam between the commands and HAL: the client methods they call, and their I/O.

``Client`` is the part of ``hal.client.HalClient`` the commands use; tests pass a small
fake through ``client_factory``. ``Console`` bundles what a command may touch outside
itself (streams, environment, clock), so commands are testable without patching globals.
"""

from __future__ import annotations

import os
import time

# what a task of a step srun ran itself used: (rank, most resident bytes (0: unknown),
# CPU seconds, and their user and system parts), as its ``wait4`` saw it
TaskUse = tuple[int, int, float, float, float]

# Every Slurm command starts here, so nothing is imported for annotations alone:
# ``typing`` (``Protocol`` is a plain base at run time: ``Client`` is for the type
# checker), the wire schemas (pydantic), ``dataclasses``.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, Protocol, TextIO

    from hal.slurm.steps import LocalStep, StepRequest
    from hal.wire.crontab import CrontabInfo, CrontabRemoved
    from hal.wire.feedback import JobFeedback
    from hal.wire.jobs import JobInfo, JobUpdate
    from hal.wire.nodes import (
        ClusterConfig,
        LicenseInfo,
        NodeInfo,
        PartitionChange,
        PartitionInfo,
        Reconfigured,
        TopologyInfo,
        UserInfo,
    )
    from hal.wire.reservations import ReservationCreate, ReservationInfo, ReservationUpdate
    from hal.wire.steps import StepCreate, StepInfo, StepInputReply, StepOutputPage
    from hal.wire.submit import JobSubmit, SubmitResult, WillRun
else:
    Protocol = object


class Client(Protocol):
    def submit(self, job: JobSubmit) -> SubmitResult: ...

    def submit_fields(self, fields: Mapping[str, object]) -> dict[str, Any]: ...

    def submit_het(self, components: list[JobSubmit]) -> list[int]: ...

    def test_only_het(self, components: list[JobSubmit]) -> list[WillRun]: ...

    def test_only(self, job: JobSubmit) -> WillRun: ...

    def jobs(
        self,
        *,
        states: list[str] | None = None,
        users: list[str] | None = None,
        partitions: list[str] | None = None,
        names: list[str] | None = None,
        ids: list[str] | None = None,
        include_finished: bool = False,
        history: bool = False,
        start_after: float | None = None,
        end_before: float | None = None,
        validate: bool = True,
        fields: list[str] | None = None,
    ) -> list[JobInfo]: ...

    def job(self, job_id: int | str, *, validate: bool = True) -> JobInfo: ...

    def cancel(
        self,
        job_id: int | str,
        *,
        signal: int | None = None,
        batch_only: bool = False,
        steps_only: bool = False,
    ) -> list[int]: ...

    def job_script(self, job_id: int | str) -> str: ...

    def set_command_exit(self, job_id: int | str, exit_code: int, signal: int = 0) -> list[int]: ...

    def hold(self, job_id: int | str, *, user: bool = False) -> list[int]: ...

    def release(self, job_id: int | str) -> list[int]: ...

    def top(self, jobs: str) -> list[int]: ...

    def requeue(self, job_id: int | str, *, hold: bool = False) -> list[int]: ...

    def suspend(self, job_id: int | str) -> list[int]: ...

    def resume(self, job_id: int | str) -> list[int]: ...

    def update_job(self, job_id: int | str, update: JobUpdate) -> JobInfo: ...

    def nodes(self, *, validate: bool = True) -> list[NodeInfo]: ...

    def node(self, name: str) -> NodeInfo: ...

    def update_node(self, name: str, state: str, reason: str = "") -> NodeInfo: ...

    def partitions(self, *, validate: bool = True) -> list[PartitionInfo]: ...

    def update_partition(self, name: str, change: PartitionChange) -> PartitionInfo: ...

    def cluster_config(self, *, validate: bool = True) -> ClusterConfig: ...

    def feedback_latest(self, job_ids: Sequence[int]) -> dict[int, JobFeedback]: ...

    def reconfigure(self) -> Reconfigured: ...

    def licenses(self) -> list[LicenseInfo]: ...

    def topology(self) -> TopologyInfo: ...

    def whoami(self, *, validate: bool = True) -> UserInfo: ...

    def reservations(self, *, validate: bool = True) -> list[ReservationInfo]: ...

    def create_reservation(self, body: ReservationCreate) -> ReservationInfo: ...

    def update_reservation(self, name: str, body: ReservationUpdate) -> ReservationInfo: ...

    def delete_reservation(self, name: str) -> None: ...

    def create_step(self, job_id: int, body: StepCreate) -> StepInfo: ...

    def step_output(
        self, job_id: int, step_id: int, *, after: int = 0, wait: float = 0.0
    ) -> StepOutputPage: ...

    def cancel_step(self, job_id: int, step_id: int, signum: int | None = None) -> None: ...

    def send_step_input(
        self,
        job_id: int,
        step_id: int,
        offset: int,
        data: bytes,
        *,
        eof: bool = False,
        winsize: tuple[int, int] | None = None,
        kept: int | None = None,
    ) -> StepInputReply: ...

    def signal_step(self, job_id: int, step_id: int, signum: int) -> None: ...

    def job_steps(self, job_id: int, *, validate: bool = True) -> list[StepInfo]: ...

    def open_local_step(
        self,
        job_id: int,
        *,
        node: str,
        ntasks: int,
        name: str,
        argv: list[str],
        request: StepRequest | None = None,
        srun: str = "",
    ) -> LocalStep: ...

    def end_local_step(
        self,
        job_id: int,
        step_id: int,
        *,
        exit_code: int,
        exit_signal: int = 0,
        oom: bool = False,
        cancelled: bool = False,
        timed_out: bool = False,
        tasks: Sequence[TaskUse] = (),
    ) -> None: ...

    def running_steps(self) -> list[StepInfo]: ...

    def crontab(self, user: str) -> CrontabInfo: ...

    def put_crontab(self, user: str, text: str, jobs: list[JobSubmit]) -> CrontabInfo: ...

    def delete_crontab(self, user: str) -> CrontabRemoved: ...

    def close(self) -> None: ...


if TYPE_CHECKING:
    ClientFactory = Callable[[], Client]


class Console:
    """A command's surroundings. The client is made on first use, so ``--help`` and
    argument errors never touch the network. ``environ`` defaults to a copy of
    ``os.environ``."""

    __slots__ = (
        "_client",
        "client_factory",
        "clock",
        "command",
        "cwd",
        "environ",
        "sleep",
        "stderr",
        "stdin",
        "stdout",
    )

    def __init__(
        self,
        command: str,
        client_factory: ClientFactory,
        stdout: TextIO,
        stderr: TextIO,
        stdin: TextIO,
        environ: Mapping[str, str] | None = None,
        cwd: str = "",
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.command = command
        self.client_factory = client_factory
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = stdin
        self.environ: Mapping[str, str] = dict(os.environ) if environ is None else environ
        self.cwd = cwd
        self.clock = clock
        self.sleep = sleep
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self.client_factory()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def out(self, line: str) -> None:
        self.stdout.write(line + "\n")

    def err(self, line: str) -> None:
        self.stderr.write(line + "\n")

    def error(self, message: str) -> int:
        """``<command>: error: <message>`` on stderr, the prefix on every line (as Slurm's
        error() prints each line); returns exit code 1."""
        for line in message.splitlines() or [""]:
            self.err(f"{self.command}: error: {line}")
        return 1

    def current_user(self) -> str:
        """The HAL user the token belongs to (``--me``)."""
        return self.client.whoami(validate=False).name
