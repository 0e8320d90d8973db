"""The synchronous SDK client (standard-library HTTP, see ``transport``)."""

from __future__ import annotations

import os
import time

from hal.client import cjson
from hal.client.config import ClientConfig, load_client_config
from hal.client.problems import error_from_response, retry_after, retrying
from hal.client.records import job_defaults, job_list, read, records
from hal.client.transport import (
    Response,
    StreamRefused,
    TlsRefused,
    Transport,
    TransportError,
    percent_encoded,
    replayable,
)
from hal.core.errors import HalError, InvalidRequest, Unavailable

# The schemas are imported where they are used: `hal sbatch` and `hal squeue` need none
# of them, and importing pydantic (even ``dataclasses``, for ``hal.wire.submit``) would
# cost them more than the rest of the command (see ``hal.client``).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path
    from types import TracebackType
    from typing import Any

    from hal.client.servers import LeaderCache, LeaderChoice, Round
    from hal.slurm.steps import LocalStep, StepRequest
    from hal.wire.accounts import AssociationList
    from hal.wire.artifacts import AliasInfo, ArtifactInfo, NodeInventory
    from hal.wire.cloud import CloudCosts, CloudPrices, CloudStatus
    from hal.wire.crontab import CrontabInfo, CrontabRemoved
    from hal.wire.diag import SchedulerDiag
    from hal.wire.feedback import JobFeedback
    from hal.wire.harmonic import Dissonance, DissonanceEval, HarmonicGraph
    from hal.wire.jobs import JobEvent, JobInfo, JobUpdate
    from hal.wire.nodes import (
        ClusterConfig,
        LicenseInfo,
        NodeInfo,
        PartitionChange,
        PartitionInfo,
        Reconfigured,
        TopologyInfo,
        UserCreated,
        UserInfo,
    )
    from hal.wire.predict import FinishedPredictionList, PredictStatus
    from hal.wire.priority import ExplainInfo, PriorityList, ShareList
    from hal.wire.reservations import ReservationCreate, ReservationInfo, ReservationUpdate
    from hal.wire.steps import StepCreate, StepInfo, StepInputReply, StepOutputPage
    from hal.wire.submit import JobSubmit, SubmitResult, WillRun


# srun's records of the steps it runs itself wait this long for the server, once: the
# command runs whether or not they land (a step is a record, not a gate)
RECORD_TIMEOUT_SECONDS = 5.0


class NoLeader(TransportError):
    """No address of the client's answered as the leader in ``HAL_FAILOVER_TIMEOUT``;
    the message names each and what it answered."""


class HalClient:
    """Talks to a HAL server: the leader among the addresses it is given (one, nearly
    always; ``hal.client.servers`` says how it finds and follows the leader). Every
    method raises a ``HalError`` subclass on failure, rebuilt from the server's
    problem+json (``code``, ``detail``, ``field``). A reading method's ``validate=False``
    returns records (``hal.client.records.read``): the wire model's attributes, no pydantic
    (the Slurm commands, which read and print)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        config: ClientConfig | None = None,
    ) -> None:
        self.config = config or load_client_config(url, token)
        headers = {"User-Agent": "hal-client", "Content-Type": "application/json"}
        if self.config.token:
            if not self.config.token.isascii() or not self.config.token.isprintable():
                raise InvalidRequest(
                    "the token (HAL_TOKEN or ~/.config/hal/credentials.json) holds characters "
                    "no HAL token has; copy it again, or `hal login --token TOKEN`",
                    field="token",
                )
            headers["Authorization"] = f"Bearer {self.config.token}"
        self._headers = headers
        # ``hal.client.servers`` is imported only where it is needed (several addresses,
        # or a standby's answer): nearly every ``sbatch`` talks to one server, at once.
        self._urls = self.config.urls
        self._leaders: LeaderChoice | None = None
        self._cache: LeaderCache | None = None
        self._transports: dict[str, Transport] = {}
        self._stream_url = ""  # where the event stream was last opened
        if len(self._urls) > 1:
            from hal.client.servers import LeaderCache

            self._cache = LeaderCache(self._choice)
        for address in self._urls:
            try:
                self._transport(address)
            except ValueError as err:
                raise InvalidRequest(
                    f"{address!r} is not a HAL server URL ({err}); set HAL_URL (or --server) to "
                    "one like http://HOST:8470 (several: comma-separated)",
                    field="url",
                ) from err

    # -- plumbing ---------------------------------------------------------------------
    def close(self) -> None:
        for transport in self._transports.values():
            transport.close()

    @property
    def _choice(self) -> LeaderChoice:
        """The addresses and which leads (``hal.client.servers``), made on first use."""
        if self._leaders is None:
            from hal.client.servers import LeaderChoice

            self._leaders = LeaderChoice(self._urls)
        return self._leaders

    def _remember(self) -> LeaderCache:
        """The leader file (``LeaderCache``), its leader and learned servers taken into
        the choice: read once, where one address was given, when it failed or named
        other servers."""
        if self._cache is None:
            from hal.client.servers import LeaderCache

            self._cache = LeaderCache(self._choice)
        return self._cache

    def leader_url(self) -> str:
        """The leader's address, for a request made outside this client (a streamed
        upload): where several are given and none has answered yet, found with a small
        read first (whatever it answers: its errors are the later request's to say)."""
        if len(self._urls) > 1 and self._choice.leader is None:
            import contextlib  # (not on sbatch's path)

            with contextlib.suppress(HalError):
                self._request("GET", "/v1/users/me", retry=False)
        return self._choice.current

    def _transport(self, url: str) -> Transport:
        """The connection to ``url``, made on first use; one of several servers connects
        with a short limit (``FAILOVER_CONNECT_SECONDS``): the next may lead."""
        transport = self._transports.get(url)
        if transport is None:
            connect_timeout: float | None = None
            if self._urls != (url,):
                from hal.client.servers import FAILOVER_CONNECT_SECONDS

                connect_timeout = FAILOVER_CONNECT_SECONDS
            transport = Transport(
                url, self._headers, self.config.timeout_seconds, connect_timeout=connect_timeout
            )
            self._transports[url] = transport
        return transport

    def __enter__(self) -> HalClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        content: str | None = None,
        params: dict[str, str] | None = None,
        json_body: Any = None,
        key: bool = False,
        retry: bool = True,
        timeout: float | None = None,
    ) -> Response:
        """Send one request; ``key``: a submission, sent with a new ``Idempotency-Key``,
        so that it may be sent again whenever it is unknown whether it landed (its answer
        lost, or the server's database lost at the COMMIT): the server answers a resend
        with the jobs of the first. ``timeout``: this request's limit, where it is not the
        client's."""
        body = content.encode() if content is not None else None
        if json_body is not None:
            body = cjson.dumps(json_body).encode()
        headers = {"Idempotency-Key": os.urandom(16).hex()} if key else None
        # (``retry=False``: a 503 is answered at once, not waited out)
        deadline = time.monotonic() + (self.config.retry_seconds if retry else 0.0)
        doubt = False  # a send whose outcome is unknown: only a resend can tell
        while True:
            left = deadline - time.monotonic()
            try:
                response = self._send(
                    method, path, params=params, body=body, headers=headers, timeout=timeout
                )
            except TlsRefused as err:
                raise Unavailable(
                    f"cannot talk to the HAL server at {self.config.url}: {err}"
                ) from err
            except NoLeader as err:
                raise Unavailable(
                    f"{err}. Is a HAL server running there? Check HAL_URL (or --server), "
                    "or wait longer for a takeover (HAL_FAILOVER_TIMEOUT)"
                ) from err
            except TransportError as err:
                if key and err.sent and not doubt:
                    doubt = True
                    retrying(f"the server's answer was lost ({err})", left)
                if doubt and left > 0:
                    time.sleep(min(1.0, left))
                    continue
                if doubt:
                    raise Unavailable(
                        f"lost the HAL server at {self.config.url} ({err}) after sending the "
                        "submission, which it may have accepted: check `hal squeue --me` "
                        "before submitting it again"
                    ) from err
                if err.sent and method != "GET":
                    raise Unavailable(
                        f"lost the HAL server at {self.config.url} ({err}) after sending the "
                        f"request ({method} {path}), so it may have carried it out: check its "
                        "effect (`hal queue`, `hal show JOB`) before sending it again"
                    ) from err
                tls = ""
                if self.config.url.startswith("http:") and "closed by the server" in str(err):
                    tls = " (a server that serves TLS closes plain HTTP: use https://)"
                raise Unavailable(
                    f"cannot reach the HAL server at {self.config.url} ({err}){tls}; "
                    "is it running? Start it (`hal up` for a local cluster, `hal server` "
                    "otherwise), or set HAL_URL to where it runs"
                ) from err
            if response.status < 400:
                return response
            wait = retry_after(response, left, key)
            if wait is None:
                raise error_from_response(response)
            time.sleep(wait)

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None,
        body: bytes | None,
        headers: dict[str, str] | None,
        timeout: float | None,
    ) -> Response:
        """Send one request to the leader. One address: sent there, its failures raised
        as they are (the common case, one path as before failover), unless it named
        other servers (``X-HAL-Servers``, now or in an earlier command): then those are
        searched; a standby's answer starts a search too. Several: ``_search``."""
        if len(self._urls) == 1 and (self._leaders is None or not self._leaders.learned):
            url = self._urls[0]
            try:
                response = self._transport(url).request(
                    method, path, params=params, body=body, headers=headers, timeout=timeout
                )
            except TransportError as err:
                if err.sent and not replayable(method, params, headers):
                    raise
                self._remember()
                if not self._choice.learned:  # (no other server known: as it is)
                    raise
                rnd = self._choice.round()
                rnd.skip(url)
                rnd.failed(url, str(err) or err.__class__.__name__)
                return self._search(
                    rnd, method, path, params=params, body=body, headers=headers, timeout=timeout
                )
            named = response.headers.get("x-hal-servers")
            if response.status not in (307, 503) and (not named or named == url):
                return response  # (no import: see above)
            cache = self._remember()
            rnd = self._choice.round()
            rnd.skip(url)
            if rnd.answered(url, response.status, response.headers):
                cache.save()
                return response
        else:
            rnd = self._choice.round()
        return self._search(
            rnd, method, path, params=params, body=body, headers=headers, timeout=timeout
        )

    def _search(
        self,
        rnd: Round,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None,
        body: bytes | None,
        headers: dict[str, str] | None,
        timeout: float | None,
    ) -> Response:
        """Send to each address in turn, following redirects, until one answers as the
        leader; a round that finds none is tried again a second later, for
        ``HAL_FAILOVER_TIMEOUT`` seconds (a takeover takes a few), then ``NoLeader``.
        A request whose answer was lost moves on only where sending it twice is safe
        (``replayable``: reads, and submissions with their ``Idempotency-Key``); any
        other is raised, for ``_request`` to say it may have been carried out."""
        from hal.client.servers import failover_timeout

        limit = failover_timeout()
        started = time.monotonic()
        resendable = replayable(method, params, headers)
        while True:
            while (url := rnd.next_url()) is not None:
                try:
                    response = self._transport(url).request(
                        method, path, params=params, body=body, headers=headers, timeout=timeout
                    )
                except ValueError as err:  # a leader's URL that is none (a redirect's)
                    rnd.failed(url, f"not a URL ({err})")
                    continue
                except TransportError as err:
                    if err.sent and not resendable:
                        raise
                    rnd.failed(url, str(err) or err.__class__.__name__)
                    continue
                if rnd.answered(url, response.status, response.headers):
                    if self._cache is not None:
                        self._cache.save()
                    return response
            waited = time.monotonic() - started
            if waited >= limit:
                raise NoLeader(rnd.summary(waited))
            time.sleep(min(1.0, limit - waited))
            rnd = self._choice.round()

    @staticmethod
    def _json(response: Response) -> Any:
        return cjson.loads(response.body)

    # -- jobs -------------------------------------------------------------------------
    def submit(self, job: JobSubmit) -> SubmitResult:
        from hal.wire.submit import SubmitResult, from_dict, non_defaults

        return from_dict(SubmitResult, self.submit_fields(non_defaults(job)))

    def submit_fields(self, fields: Mapping[str, object]) -> dict[str, Any]:
        """``submit`` of a job given as its JSON: ``JobSubmit``'s field names with JSON
        values, the fields left out taking the schema's defaults. The server validates it
        as any submission and answers ``SubmitResult``'s fields. For a command that must
        start without importing the schemas (``sbatch``)."""
        content = cjson.dumps(fields, compact=True)
        answer: dict[str, Any] = self._json(
            self._request("POST", "/v1/jobs", content=content, key=True)
        )
        return answer

    def submit_many(self, jobs: list[JobSubmit]) -> list[SubmitResult]:
        from hal.wire.submit import SubmitResult, from_dict, non_defaults

        r = self._request(
            "POST",
            "/v1/jobs/batch",
            json_body={"jobs": [non_defaults(j) for j in jobs]},
            key=True,
        )
        return [from_dict(SubmitResult, d) for d in self._json(r)["results"]]

    def submit_het(self, components: list[JobSubmit]) -> list[int]:
        """A heterogeneous job: all components start together (docs/user/hetjobs.md). The
        components' ids, consecutive; the first is the het job id."""
        from hal.wire.submit import non_defaults

        body = {"components": [non_defaults(c) for c in components]}
        r = self._request("POST", "/v1/jobs/het", json_body=body, key=True)
        return [int(i) for i in self._json(r)["component_ids"]]

    def test_only_het(self, components: list[JobSubmit]) -> list[WillRun]:
        """``--test-only`` of a het job: each component's nodes, one start for all."""
        from hal.wire.submit import WillRun, from_dict, non_defaults

        body = {"components": [non_defaults(c) for c in components]}
        r = self._request("POST", "/v1/jobs/het/test", json_body=body)
        return [from_dict(WillRun, d) for d in self._json(r)]

    def test_only(self, job: JobSubmit) -> WillRun:
        from hal.wire.submit import WillRun, from_dict, to_json

        r = self._request("POST", "/v1/jobs/test", content=to_json(job))
        return from_dict(WillRun, self._json(r))

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
    ) -> list[JobInfo]:
        """List jobs. By default PENDING/RUNNING/COMPLETING ones; ``include_finished`` adds
        jobs that ended within MinJobAge (``squeue -t all``); ``history`` reads every job
        ever run (``sacct``). ``ids`` accepts ``123``, ``100_7`` and ``100`` (whole
        array). ``validate=False``: the jobs as ``hal.client.records`` read them, with
        ``JobInfo``'s attributes and no pydantic (``squeue``); ``fields`` (with it): only
        these of JobInfo's attributes, the others not sent (``squeue`` asks for those its
        format shows; a server that does not know ``fields=`` sends them all), and those
        at their default left out where none holds objects (``omit_defaults``, ADR 0028:
        the records read them from ``JOB_DEFAULTS``), a long list decoded by msgspec
        (``records.job_list``))."""
        params: dict[str, str] = {}
        for key, values in (
            ("state", states),
            ("user", users),
            ("partition", partitions),
            ("name", names),
            ("id", ids),
        ):
            if values:
                params[key] = ",".join(values)
        if include_finished:
            params["all"] = "true"
        if history:
            params["history"] = "true"
        if start_after is not None:
            params["start_after"] = repr(start_after)
        if end_before is not None:
            params["end_before"] = repr(end_before)
        defaults = None
        if fields:
            if validate:
                raise ValueError("fields= lists records: ask with validate=False")
            params["fields"] = ",".join(fields)
            defaults = job_defaults(fields)
            if defaults:
                params["omit_defaults"] = "true"
        r = self._request("GET", "/v1/jobs", params=params)
        if not validate:
            if fields and defaults is not None:
                return job_list(r.body, fields, defaults)
            views: list[JobInfo] = records(r.body, defaults).jobs
            return views
        from hal.wire.jobs import JobList

        return JobList.model_validate_json(r.body).jobs

    def job(self, job_id: int | str, *, validate: bool = True) -> JobInfo:
        r = self._request("GET", f"/v1/jobs/{segment(job_id)}")
        found: JobInfo = read(r.body, "jobs.JobInfo", validate=validate)
        return found

    # -- job steps (ADR 0012) --------------------------------------------------------------
    def create_step(self, job_id: int, body: StepCreate) -> StepInfo:
        from hal.wire.steps import StepInfo

        r = self._request("POST", f"/v1/jobs/{job_id}/steps", content=body.model_dump_json())
        return StepInfo.model_validate_json(r.body)

    def step_output(
        self, job_id: int, step_id: int, *, after: int = 0, wait: float = 0.0
    ) -> StepOutputPage:
        from hal.wire.steps import StepOutputPage

        params = {"after": str(after), "wait": str(wait)}
        r = self._request("GET", f"/v1/jobs/{job_id}/steps/{step_id}/output", params=params)
        return StepOutputPage.model_validate_json(r.body)

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
    ) -> StepInputReply:
        """srun's stdin bytes ``offset..`` (and its end) for a step's tasks; the server
        may hold the request while the step's buffer is full. Not retried here: a resend
        is harmless, and srun sends again from the reply's offset. ``winsize`` (srun
        --pty): srun's terminal is now (rows, columns); ``kept``: srun holds its input
        from there on (``StepInputChunk``)."""
        import base64

        from hal.wire.steps import StepInputReply

        body: dict[str, object] = {
            "offset": offset,
            "data_b64": base64.b64encode(data).decode(),
            "eof": eof,
        }
        if winsize is not None:
            body["winsize"] = list(winsize)
        if kept is not None:
            body["kept"] = kept
        path = f"/v1/jobs/{job_id}/steps/{step_id}/input"
        r = self._request("POST", path, json_body=body, retry=False)
        return StepInputReply.model_validate_json(r.body)

    def report_feedback(self, job_id: int, metrics: Mapping[str, float]) -> JobFeedback:
        """Report a running job's metrics (docs/feedback.md); the client's token must be
        the job's ``HAL_FEEDBACK_TOKEN``. Not retried: a report is cheap to lose and a
        resend would count twice."""
        from hal.wire.feedback import JobFeedback

        body = {"metrics": dict(metrics)}
        r = self._request("POST", f"/v1/jobs/{job_id}/feedback", json_body=body, retry=False)
        return JobFeedback.model_validate_json(r.body)

    def feedback_latest(self, job_ids: Sequence[int]) -> dict[int, JobFeedback]:
        """The latest values of the jobs' metrics (no series), by job id; jobs that
        reported nothing are left out."""
        from hal.wire.feedback import FeedbackList

        found: dict[int, JobFeedback] = {}
        ids = list(job_ids)
        for start in range(0, len(ids), 500):
            chunk = ",".join(str(j) for j in ids[start : start + 500])
            r = self._request("GET", "/v1/feedback", params={"jobs": chunk})
            for job in FeedbackList.model_validate_json(r.body).jobs:
                found[job.id] = job
        return found

    def job_feedback(self, job_id: int, *, points: bool = True) -> JobFeedback:
        """A job's reported metrics: latest value, goal, count and the kept series."""
        from hal.wire.feedback import JobFeedback

        params = {"points": "true" if points else "false"}
        r = self._request("GET", f"/v1/jobs/{job_id}/feedback", params=params)
        return JobFeedback.model_validate_json(r.body)

    def job_steps(self, job_id: int, *, validate: bool = True) -> list[StepInfo]:
        """The job's running steps with their tasks' latest usage (``sstat``)."""
        r = self._request("GET", f"/v1/jobs/{job_id}/steps")
        found: list[StepInfo] = read(r.body, "steps.StepList", validate=validate).steps
        return found

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
    ) -> LocalStep:
        """Record a step srun runs on the batch node ``node`` itself. One try, within
        ``RECORD_TIMEOUT_SECONDS``: a record must not hold the command. ``request``:
        the job's CPUs and memory it holds (``-c``, ``--exact``, ``--overlap``,
        ``--mem``); ``srun``: the calling srun process, "PID:START"
        (``StepCreate.srun``)."""
        body: dict[str, Any] = {
            "argv": argv[:1],  # (the server keeps only the name; the command runs here)
            "ntasks": ntasks,
            "nodelist": [node],
            "name": name,
            "local": True,
            "srun": srun,
        }
        if request is not None:
            body.update(
                cpus_per_task=request.cpus_per_task,
                exact=request.exact,
                overlap=request.overlap,
                mem_per_node=request.mem_per_node,
                mem_per_cpu=request.mem_per_cpu,
            )
        r = self._record("POST", f"/v1/jobs/{job_id}/steps", body)
        info = self._json(r)
        places = info.get("cpus", {}).get(node, ())
        memory = int(info.get("memory_bytes", 0))
        from hal.slurm.steps import LocalStep

        return LocalStep(int(info["step_id"]), tuple(int(p) for p in places), memory)

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
        tasks: Sequence[tuple[int, int, float, float, float]] = (),
    ) -> None:
        """Report the end of a step ``open_local_step`` recorded (one try, as it), with
        what its tasks used (``tasks``: rank, most resident bytes, CPU seconds, and their
        user and system parts)."""
        body = {
            "exit_code": exit_code,
            "exit_signal": exit_signal,
            "oom": oom,
            "cancelled": cancelled,
            "timed_out": timed_out,
            "tasks": [
                {
                    "rank": rank,
                    "max_rss_bytes": rss,
                    "cpu_seconds": cpu,
                    "user_cpu_seconds": user,
                    "system_cpu_seconds": system,
                }
                for rank, rss, cpu, user, system in tasks
            ],
        }
        self._record("POST", f"/v1/jobs/{job_id}/steps/{step_id}/end", body)

    def _record(self, method: str, path: str, body: dict[str, Any]) -> Response:
        limit = min(self.config.timeout_seconds, RECORD_TIMEOUT_SECONDS)
        return self._request(method, path, json_body=body, retry=False, timeout=limit)

    def running_steps(self) -> list[StepInfo]:
        """Every job's running steps, by job and step id (``squeue -s``)."""
        from hal.wire.steps import StepList

        r = self._request("GET", "/v1/steps")
        return StepList.model_validate_json(r.body).steps

    def signal_step(self, job_id: int, step_id: int, signum: int) -> None:
        path = f"/v1/jobs/{job_id}/steps/{step_id}/signal"
        self._request("POST", path, json_body={"signal": signum})

    def cancel_step(self, job_id: int, step_id: int, signum: int | None = None) -> None:
        """``scancel JOB.STEP`` (with ``signum``: ``scancel -s SIG JOB.STEP``)."""
        path = f"/v1/jobs/{job_id}/steps/{step_id}/cancel"
        self._request("POST", path, json_body={"signal": signum})

    def job_script(self, job_id: int | str) -> str:
        return self._request("GET", f"/v1/jobs/{segment(job_id)}/script").text

    def cancel(
        self,
        job_id: int | str,
        *,
        signal: int | None = None,
        batch_only: bool = False,
        steps_only: bool = False,
    ) -> list[int]:
        """Cancel a job, an array element (``100_7``) or a whole array (``100``); with
        ``signal``, only send that signal (to the batch shell alone with ``batch_only``,
        to the job's steps alone with ``steps_only``). Returns the ids affected."""
        params = {"signal": str(signal)} if signal is not None else {}
        if batch_only:
            params["batch_only"] = "true"
        if steps_only:
            params["steps_only"] = "true"
        r = self._request("DELETE", f"/v1/jobs/{segment(job_id)}", params=params)
        return list(self._json(r).get("job_ids", []))

    def set_command_exit(self, job_id: int | str, exit_code: int, signal: int = 0) -> list[int]:
        """The exit status the running job ends with once its batch script exits (salloc
        records its command's for its allocation)."""
        params = {"exit_code": str(exit_code), "signal": str(signal)}
        r = self._request("POST", f"/v1/jobs/{segment(job_id)}/command-exit", params=params)
        return list(self._json(r).get("job_ids", []))

    def hold(self, job_id: int | str, *, user: bool = False) -> list[int]:
        """Hold a pending job; ``user``: a hold its owner may release (``scontrol uhold``)
        even when an administrator places it."""
        params = {"user": "true"} if user else {}
        r = self._request("POST", f"/v1/jobs/{segment(job_id)}/hold", params=params)
        return list(self._json(r)["job_ids"])

    def top(self, jobs: str) -> list[int]:
        """Move pending jobs ("12,15") to the top of their owner's queue (``scontrol
        top``): the ids of the jobs whose priority changed."""
        r = self._request("POST", "/v1/priority/top", params={"jobs": jobs})
        return list(self._json(r)["job_ids"])

    def release(self, job_id: int | str) -> list[int]:
        r = self._request("POST", f"/v1/jobs/{segment(job_id)}/release")
        return list(self._json(r).get("job_ids", []))

    def suspend(self, job_id: int | str) -> list[int]:
        return list(
            self._json(self._request("POST", f"/v1/jobs/{segment(job_id)}/suspend"))["job_ids"]
        )

    def resume(self, job_id: int | str) -> list[int]:
        return list(
            self._json(self._request("POST", f"/v1/jobs/{segment(job_id)}/resume"))["job_ids"]
        )

    def requeue(self, job_id: int | str, *, hold: bool = False) -> list[int]:
        """``hold`` (``scontrol requeuehold``): back in the queue held by its owner."""
        params = {"hold": "true"} if hold else {}
        r = self._request("POST", f"/v1/jobs/{segment(job_id)}/requeue", params=params)
        return list(self._json(r).get("job_ids", []))

    def update_job(self, job_id: int | str, update: JobUpdate) -> JobInfo:
        r = self._request(
            "PATCH",
            f"/v1/jobs/{segment(job_id)}",
            content=update.model_dump_json(exclude_none=True),
        )
        from hal.wire.jobs import JobInfo

        return JobInfo.model_validate_json(r.body)

    def events(self, after: int = 0, *, follow: bool = True) -> Iterator[JobEvent]:
        """Server-sent job and node events after event id ``after`` (resumable). A
        followed stream goes on across a server restart or a takeover: it is taken up
        again after the last event it gave, at the leader among the client's addresses,
        while no server leads for up to ``HAL_RETRY_SECONDS`` (``HAL_FAILOVER_TIMEOUT``
        if that is longer and several are given)."""
        from hal.wire.jobs import JobEvent

        patience = self.config.retry_seconds
        if len(self._urls) > 1:
            from hal.client.servers import failover_timeout

            patience = max(patience, failover_timeout())
        away: float | None = None  # since when a followed stream has had no server
        while True:
            params = {"after": str(after), "follow": "true" if follow else "false"}
            try:
                for line in self._open_stream(params):
                    away = None
                    if line.startswith("data:"):
                        event = JobEvent.model_validate_json(line[5:].strip())
                        after = event.id
                        yield event
                if not follow:
                    return
                why = "the server closed it"  # it stopped: a restart follows, or not
                self._choice.passed(self._stream_url)
            except StreamRefused as refused:
                if not follow or refused.response.status != 503:
                    raise error_from_response(refused.response) from None
                why = error_from_response(refused.response).message
            except TransportError as err:
                if not follow:
                    raise Unavailable(f"event stream from {self.config.url} broke: {err}") from err
                why = str(err)
                self._choice.passed(self._stream_url)
            now = time.monotonic()
            if away is None and len(self._urls) > 1:
                away = now  # a stream that was up: the next address may lead already
                continue
            away = now if away is None else away
            if now - away >= patience:
                raise Unavailable(f"event stream from {self.config.url} broke: {why}")
            time.sleep(1.0)

    def _open_stream(self, params: dict[str, str]) -> Iterator[str]:
        """The event stream's lines from the leader: one round over the addresses
        (``events`` waits between rounds). One address: its failure as it is; several
        that all fail: ``NoLeader``."""
        rnd = self._choice.round()
        while (url := rnd.next_url()) is not None:
            try:
                lines = self._transport(url).open_stream("/v1/events", params)
            except StreamRefused as refused:
                answer = refused.response
                if rnd.answered(url, answer.status, answer.headers) or self._alone(rnd):
                    raise
                continue
            except ValueError as err:  # a leader's URL that is none (a redirect's)
                rnd.failed(url, f"not a URL ({err})")
                continue
            except TransportError as err:
                rnd.failed(url, str(err) or err.__class__.__name__)
                if self._alone(rnd):
                    raise
                continue
            self._choice.lead(url)
            self._stream_url = url
            return lines
        raise NoLeader(rnd.summary())

    def _alone(self, rnd: Round) -> bool:
        """Whether the round's one address failed, as a client of one server does."""
        return len(self._urls) == 1 and len(rnd.tried) == 1 and not rnd.pending

    # -- nodes, partitions, config --------------------------------------------------------
    def nodes(self, *, validate: bool = True) -> list[NodeInfo]:
        r = self._request("GET", "/v1/nodes")
        found: list[NodeInfo] = read(r.body, "nodes.NodeList", validate=validate).nodes
        return found

    def node(self, name: str) -> NodeInfo:
        from hal.wire.nodes import NodeInfo

        return NodeInfo.model_validate_json(
            self._request("GET", f"/v1/nodes/{segment(name, 'node name', 'hal sinfo')}").body
        )

    def update_node(self, name: str, state: str, reason: str = "") -> NodeInfo:
        from hal.wire.nodes import NodeInfo, NodeUpdate

        body = NodeUpdate(state=state, reason=reason).model_dump_json()
        r = self._request(
            "PATCH", f"/v1/nodes/{segment(name, 'node name', 'hal sinfo')}", content=body
        )
        return NodeInfo.model_validate_json(r.body)

    def partitions(self, *, validate: bool = True) -> list[PartitionInfo]:
        r = self._request("GET", "/v1/partitions")
        found: list[PartitionInfo] = read(
            r.body, "nodes.PartitionList", validate=validate
        ).partitions
        return found

    def update_partition(self, name: str, change: PartitionChange) -> PartitionInfo:
        """``scontrol update PartitionName=`` (administrators): set ``change``'s fields."""
        from hal.wire.nodes import PartitionInfo

        path = f"/v1/partitions/{segment(name, 'partition name', 'hal sinfo')}"
        body = change.model_dump_json(exclude_none=True)
        r = self._request("PATCH", path, content=body)
        return PartitionInfo.model_validate_json(r.body)

    def licenses(self) -> list[LicenseInfo]:
        from hal.wire.nodes import LicenseList

        r = self._request("GET", "/v1/licenses")
        return LicenseList.model_validate_json(r.body).licenses

    def topology(self) -> TopologyInfo:
        from hal.wire.nodes import TopologyInfo

        r = self._request("GET", "/v1/topology")
        return TopologyInfo.model_validate_json(r.body)

    def cluster_config(self, *, validate: bool = True) -> ClusterConfig:
        r = self._request("GET", "/v1/config")
        found: ClusterConfig = read(r.body, "nodes.ClusterConfig", validate=validate)
        return found

    def reconfigure(self) -> Reconfigured:
        """``scontrol reconfigure`` (administrators): the server re-reads its hal.toml."""
        from hal.wire.nodes import Reconfigured

        r = self._request("POST", "/v1/reconfigure")
        return Reconfigured.model_validate_json(r.body)

    # -- advance reservations ------------------------------------------------------------
    def reservations(self, *, validate: bool = True) -> list[ReservationInfo]:
        r = self._request("GET", "/v1/reservations")
        listed = read(r.body, "reservations.ReservationList", validate=validate)
        found: list[ReservationInfo] = listed.reservations
        return found

    def reservation(self, name: str) -> ReservationInfo:
        from hal.wire.reservations import ReservationInfo

        r = self._request("GET", _reservation_path(name))
        return ReservationInfo.model_validate_json(r.body)

    def create_reservation(self, body: ReservationCreate) -> ReservationInfo:
        from hal.wire.reservations import ReservationInfo

        content = body.model_dump_json(exclude_none=True)
        r = self._request("POST", "/v1/reservations", content=content)
        return ReservationInfo.model_validate_json(r.body)

    def update_reservation(self, name: str, body: ReservationUpdate) -> ReservationInfo:
        from hal.wire.reservations import ReservationInfo

        content = body.model_dump_json(exclude_unset=True)
        r = self._request("PATCH", _reservation_path(name), content=content)
        return ReservationInfo.model_validate_json(r.body)

    def delete_reservation(self, name: str) -> None:
        self._request("DELETE", _reservation_path(name))

    # -- the compute control plane -------------------------------------------------------
    def cloud_status(self) -> CloudStatus:
        """The node groups of ``[cloud]`` and the nodes the autoscaler made."""
        from hal.wire.cloud import CloudStatus

        r = self._request("GET", "/v1/cloud")
        return CloudStatus.model_validate_json(r.body)

    def cloud_prices(self) -> CloudPrices:
        """Each group's price an hour, its source and age."""
        from hal.wire.cloud import CloudPrices

        r = self._request("GET", "/v1/cloud/prices")
        return CloudPrices.model_validate_json(r.body)

    def cloud_costs(self, since: float | None = None) -> CloudCosts:
        """What cloud capacity cost per account and user since ``since`` (None: this
        month), and each budget."""
        from hal.wire.cloud import CloudCosts

        params = {} if since is None else {"since": str(since)}
        r = self._request("GET", "/v1/cloud/costs", params=params)
        return CloudCosts.model_validate_json(r.body)

    # -- artifacts (docs/user/artifacts.md) -------------------------------------------------
    def artifacts(self, name: str | None = None) -> list[ArtifactInfo]:
        from hal.wire.artifacts import ArtifactList

        r = self._request("GET", "/v1/artifacts", params={"name": name} if name else None)
        return ArtifactList.model_validate_json(r.body).artifacts

    def artifact(self, name: str, version: str = "latest") -> ArtifactInfo:
        from hal.client.artifacts import path_of
        from hal.wire.artifacts import ArtifactInfo

        return ArtifactInfo.model_validate_json(self._request("GET", path_of(name, version)).body)

    def push_artifact(
        self, name: str, version: str, path: Path, kind: str | None = None
    ) -> tuple[ArtifactInfo, bool]:
        """Publish the file as ``name@version``; (the version, whether it is new).
        ``kind``: archive or program (None: an archive by the file's suffix)."""
        from hal.client.artifacts import push
        from hal.wire.artifacts import ArtifactInfo

        body, new = push(self, name, version, path, kind)
        return ArtifactInfo.model_validate_json(body), new

    def pull_artifact(self, name: str, version: str, dest: Path) -> str:
        """Download a version's content to ``dest`` (a program made executable);
        returns its (checked) sha256."""
        from hal.client.artifacts import pull

        return pull(self, name, version, dest)

    def remove_artifact(self, name: str, version: str) -> ArtifactInfo:
        from hal.client.artifacts import path_of
        from hal.wire.artifacts import ArtifactInfo

        r = self._request("DELETE", path_of(name, version))
        return ArtifactInfo.model_validate_json(r.body)

    def artifact_aliases(self, name: str) -> list[AliasInfo]:
        from hal.client.artifacts import alias_path
        from hal.wire.artifacts import AliasList

        r = self._request("GET", alias_path(name))
        return AliasList.model_validate_json(r.body).aliases

    def promote_artifact(
        self, name: str, version: str, alias: str, canary: str | None = None
    ) -> AliasInfo:
        """Point ``name@alias`` at ``version``; ``canary`` ("10%"): that share of the jobs
        naming the alias get it, the others the alias's version."""
        from hal.client.artifacts import alias_path
        from hal.wire.artifacts import AliasInfo

        path = alias_path(name, alias)
        body = {"version": version, **({"canary": canary} if canary is not None else {})}
        r = self._request("PUT", path, json_body=body, retry=False)
        return AliasInfo.model_validate_json(r.body)

    def rollback_artifact(self, name: str, alias: str = "stable") -> AliasInfo:
        from hal.client.artifacts import alias_path
        from hal.wire.artifacts import AliasInfo

        path = alias_path(name, alias) + "/rollback"
        r = self._request("POST", path, retry=False)
        return AliasInfo.model_validate_json(r.body)

    def artifact_nodes(self, name: str | None = None) -> list[NodeInventory]:
        from hal.wire.artifacts import ArtifactNodes

        r = self._request("GET", "/v1/artifact-nodes", params={"name": name} if name else None)
        return ArtifactNodes.model_validate_json(r.body).nodes

    # -- the traffic graph ----------------------------------------------------------------
    def harmonic_graph(
        self, *, job: str | None = None, user: str | None = None, limit: int = 1000
    ) -> HarmonicGraph:
        """Who talks to whom: every edge, or a job's (``12``, ``12_3``), or a user's."""
        from hal.wire.harmonic import HarmonicGraph

        params = {"limit": str(limit)}
        if job is not None:
            params["job"] = job
        if user is not None:
            params["user"] = user
        r = self._request("GET", "/v1/harmonic/graph", params=params)
        return HarmonicGraph.model_validate_json(r.body)

    def harmonic_dissonance(self) -> Dissonance:
        """The learned interference model: a slowdown per ordered pair of classes."""
        from hal.wire.harmonic import Dissonance

        return Dissonance.model_validate_json(self._request("GET", "/v1/harmonic/dissonance").body)

    def harmonic_eval(self) -> DissonanceEval:
        """The interference model's predictions on the last job ends, checked."""
        from hal.wire.harmonic import DissonanceEval

        return DissonanceEval.model_validate_json(self._request("GET", "/v1/harmonic/eval").body)

    # -- the run-time predictor ----------------------------------------------------------
    def predict_status(self) -> PredictStatus:
        from hal.wire.predict import PredictStatus

        r = self._request("GET", "/v1/predict/status")
        return PredictStatus.model_validate_json(r.body)

    def predict_finished(self, limit: int = 200) -> FinishedPredictionList:
        """The last finished runs with the run time predicted when each started."""
        from hal.wire.predict import FinishedPredictionList

        r = self._request("GET", f"/v1/predict/finished?limit={limit}")
        return FinishedPredictionList.model_validate_json(r.body)

    def predict_history(
        self, limit: int = 1000, before: tuple[float, int] | None = None
    ) -> list[JobInfo]:
        """A page of the jobs that ran and ended, the latest end first; ``before``:
        (end time, id) of the last job of the previous page."""
        from hal.wire.jobs import JobList

        params: dict[str, str] = {"limit": str(limit)}
        if before is not None:
            params["before_end"], params["before_id"] = repr(before[0]), str(before[1])
        r = self._request("GET", "/v1/predict/history", params=params)
        return JobList.model_validate_json(r.body).jobs

    # -- priority, fair share, explanations ----------------------------------------------
    def priorities(
        self,
        *,
        users: list[str] | None = None,
        ids: list[str] | None = None,
        partitions: list[str] | None = None,
        validate: bool = True,
    ) -> PriorityList:
        """Pending jobs' multifactor priority factors (``sprio``)."""
        params = {
            key: ",".join(values)
            for key, values in (("user", users), ("id", ids), ("partition", partitions))
            if values
        }
        r = self._request("GET", "/v1/priority", params=params)
        found: PriorityList = read(r.body, "priority.PriorityList", validate=validate)
        return found

    def shares(
        self,
        *,
        users: list[str] | None = None,
        accounts: list[str] | None = None,
        validate: bool = True,
    ) -> ShareList:
        """The fair-share tree (``sshare``)."""
        params = {
            key: ",".join(values)
            for key, values in (("user", users), ("account", accounts))
            if values
        }
        r = self._request("GET", "/v1/shares", params=params)
        found: ShareList = read(r.body, "priority.ShareList", validate=validate)
        return found

    def associations(self) -> AssociationList:
        """hal.toml's accounts, user associations and QoS (``sacctmgr show``)."""
        from hal.wire.accounts import AssociationList

        r = self._request("GET", "/v1/associations")
        return AssociationList.model_validate_json(r.body)

    def diag(self) -> SchedulerDiag:
        """The scheduler's statistics since the server started (``sdiag``)."""
        from hal.wire.diag import SchedulerDiag

        return SchedulerDiag.model_validate_json(self._request("GET", "/v1/diag").body)

    def reset_diag(self) -> None:
        """``sdiag -r`` (administrators): sdiag's counters start again from 0."""
        self._request("POST", "/v1/diag/reset")

    def explain(self, job_id: int | str) -> ExplainInfo:
        """Why a job is pending (``hal explain``)."""
        from hal.wire.priority import ExplainInfo

        r = self._request("GET", f"/v1/jobs/{segment(job_id)}/explain")
        return ExplainInfo.model_validate_json(r.body)

    # -- crontabs (scrontab, docs/user/scrontab.md) -------------------------------------------
    def crontab(self, user: str) -> CrontabInfo:
        from hal.wire.crontab import CrontabInfo

        r = self._request("GET", _crontab_path(user))
        return CrontabInfo.model_validate_json(r.body)

    def put_crontab(self, user: str, text: str, jobs: list[JobSubmit]) -> CrontabInfo:
        """Replace ``user``'s crontab: ``jobs`` holds one job per entry, in order."""
        from hal.wire.crontab import CrontabInfo
        from hal.wire.submit import non_defaults

        body = {"text": text, "jobs": [non_defaults(j) for j in jobs]}
        r = self._request("PUT", _crontab_path(user), json_body=body)
        return CrontabInfo.model_validate_json(r.body)

    def delete_crontab(self, user: str) -> CrontabRemoved:
        from hal.wire.crontab import CrontabRemoved

        r = self._request("DELETE", _crontab_path(user))
        return CrontabRemoved.model_validate_json(r.body)

    # -- users ------------------------------------------------------------------------
    def whoami(self, *, validate: bool = True) -> UserInfo:
        """Who the token belongs to; ``validate=False`` as ``jobs`` takes it (``--me``)."""
        body = self._request("GET", "/v1/users/me").body
        if not validate:
            view: UserInfo = records(body)
            return view
        from hal.wire.nodes import UserInfo

        return UserInfo.model_validate_json(body)

    def add_user(
        self, name: str, *, admin: bool = False, agent: bool = False, nodes: str = ""
    ) -> UserCreated:
        """Create user ``name`` (admin only); ``agent``: a node agent's token, accepted by
        the agent channel only, for the nodes of the host list ``nodes`` ("" for any)."""
        from hal.wire.nodes import UserCreated

        body: dict[str, object] = {"name": name, "admin": admin}
        if agent or nodes:  # only then: a server older than agent tokens refuses the keys
            body.update(agent=agent, nodes=nodes)
        r = self._request("POST", "/v1/users", json_body=body)
        return UserCreated.model_validate_json(r.body)

    def new_token(self, name: str) -> UserCreated:
        """A new token for user ``name`` (admin only); its old token stops working."""
        from hal.wire.nodes import UserCreated

        path = f"/v1/users/{segment(name, 'user name', 'hal user list')}/token"
        return UserCreated.model_validate_json(self._request("POST", path).body)

    def delete_user(self, name: str) -> UserInfo:
        """Remove user ``name`` (admin only); their token stops working, their jobs stay."""
        from hal.wire.nodes import UserInfo

        path = f"/v1/users/{segment(name, 'user name', 'hal user list')}"
        return UserInfo.model_validate_json(self._request("DELETE", path).body)

    def users(self) -> list[UserInfo]:
        from hal.wire.nodes import UserInfo

        r = self._request("GET", "/v1/users")
        return [UserInfo.model_validate(u) for u in self._json(r)["users"]]


def segment(value: int | str, what: str = "job id", lister: str = "hal squeue") -> str:
    """``value`` as one URL path segment: any character a user typed (``?``, ``#``, a
    space, unicode) stays part of the id instead of breaking or redirecting the request."""
    text = str(value)
    if not text:
        raise InvalidRequest(f"the {what} is empty; `{lister}` lists them")
    if "/" in text:  # the server decodes %2F before routing: it would pick another route
        raise InvalidRequest(
            f"invalid {what} {text!r} (no {what} has a '/'); `{lister}` lists them"
        )
    return percent_encoded(text)


def _crontab_path(user: str) -> str:
    return f"/v1/crontab/{segment(user, 'user name', 'hal users')}"


def _reservation_path(name: str) -> str:
    return f"/v1/reservations/{segment(name, 'reservation name', 'hal scontrol show reservation')}"
