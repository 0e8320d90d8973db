"""What ``hal up`` prints once its cluster is up: where the REST API and the dashboard are
(with a link that logs in), where the state is, what each agent offers, how to reach the
cluster from another shell, and what Ctrl-C does with running jobs."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

from hal.cli.host_share import AgentShare
from hal.client.config import credentials_path

AGENTS_SHOWN = 4  # agents listed one a line; more are summed up
LABEL = 16  # the labels' column


@dataclass(frozen=True, slots=True)
class Banner:
    url: str
    admin_token: str
    data_dir: Path
    shares: list[AgentShare]
    keep_jobs: bool = False
    adopted: tuple[str, ...] = ()  # running since the last stop (--keep-jobs, a crash)

    def lines(self) -> list[str]:
        # the token goes in the URL's fragment, which a browser never sends to a server
        # (nor to a proxy's log); the dashboard moves it to its own storage at once
        lines = [
            f"HAL is up: {self.url}  (REST API, /docs)",
            *_field("dashboard:", f"{self.url}/ui#token={self.admin_token}  (logs you in)"),
            *_field("state:", f"{self.data_dir}  (kept when HAL stops; `hal up` resumes it)"),
            *_field("agents:", *self._agents()),
        ]
        if self.adopted:
            ids = ", ".join(self.adopted[:10]) + (" ..." if len(self.adopted) > 10 else "")
            lines += _field(
                "adopted:",
                f"{len(self.adopted)} job(s) kept running since the last stop ({ids}); "
                "their agents take them over",
            )
        stop = (
            "Ctrl-C; running jobs keep running (--keep-jobs): the next `hal up` on this "
            "state adopts them"
            if self.keep_jobs
            else "Ctrl-C; running jobs are cancelled with the cluster (--keep-jobs: left "
            "running), pending jobs stay queued"
        )
        return [
            *lines,
            *_field("submit:", "hal sbatch --wrap 'hostname'      or  hal sbatch job.sh"),
            *_field("watch:", "hal squeue    hal sinfo    hal sacct    hal show JOB"),
            *_field("other shells:", *self._other_shells()),
            *_field("stop:", stop),
        ]

    def _agents(self) -> list[str]:
        if not self.shares:
            return ["none (--agents 0): start some with `hal agent`"]
        shown = [share.describe() for share in self.shares[:AGENTS_SHOWN]]
        if len(self.shares) > AGENTS_SHOWN:
            shown.append(f"and {len(self.shares) - AGENTS_SHOWN} more like them")
        return shown

    def _other_shells(self) -> list[str]:
        venv = repository_venv()
        activate = [f". {venv}/bin/activate  (or use {venv}/bin/hal)"] if venv else []
        return [
            *activate,
            f"export HAL_URL={self.url}  (your token is stored in {credentials_path()})",
        ]


def _field(label: str, *values: str) -> list[str]:
    """``label`` and its first value on one line, the others below it."""
    return [f"  {label if i == 0 else '':<{LABEL - 2}}{v}" for i, v in enumerate(values)]


def repository_venv() -> str | None:
    """The virtual environment ``hal`` runs from when it is a repository's (``make up``:
    ``.venv`` beside ``pyproject.toml``), as a shell here writes it (relative when under
    the working directory); None for any other Python, whose ``hal`` is on the PATH."""
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix) or not (venv / "bin" / "activate").exists():
        return None
    if not (venv.parent / "pyproject.toml").exists():
        return None
    with contextlib.suppress(ValueError):
        return str(venv.relative_to(Path.cwd()))
    return str(venv)
