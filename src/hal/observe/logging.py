"""JSON structured logs: one object per line with timestamp, level, event, logger, service,
and the context bound with ``structlog.contextvars`` (``job_id``, ``node``, ...) plus
``trace_id``/``span_id`` from the current OpenTelemetry span (conventions §2.5).

structlog renders on top of stdlib logging, so uvicorn's, SQLAlchemy's and HAL's own
``logging.getLogger`` records go through the same processors (``extra={...}`` fields are
kept). ``configure_logging`` is called once by the ``hal server``/``hal up`` commands; the
library code never configures logging itself (tests keep pytest's capture).

Units go in key names (``duration_s``); job scripts and environments are never logged.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog
from opentelemetry import trace

from hal.observe.config import LOG_LEVELS

LEVELS = {name: getattr(logging, name.upper()) for name in LOG_LEVELS}


def add_trace_ids(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """``trace_id``/``span_id`` of the span current where the record was made, if any."""
    if "trace_id" in event:
        return event
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event["trace_id"] = f"{ctx.trace_id:032x}"
        event["span_id"] = f"{ctx.span_id:016x}"
    return event


def _service(name: str) -> structlog.types.Processor:
    def add(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
        event.setdefault("service", name)
        return event

    return add


def shared_processors(service: str) -> list[structlog.types.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        _service(service),
        add_trace_ids,
    ]


def configure_logging(
    level: str = "info",
    fmt: str = "json",
    *,
    service: str = "hal-server",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log record (structlog and stdlib) to ``stream`` as JSON lines (or a
    readable console format). Returns the installed handler."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    shared = shared_processors(service)
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=False)
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    # libraries' per-request INFO lines (httpx logs every request) drown HAL's own
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, LEVELS[level]))
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_hal_structured", False):
            root.removeHandler(old)
    handler._hal_structured = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    # uvicorn installs its own handlers; route its records through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers = []
        lg.propagate = True
    return handler


def get_logger(name: str) -> Any:
    """A structlog logger (``log.info("job.started", job_id=..., node=...)``)."""
    return structlog.stdlib.get_logger(name)


def uvicorn_log_config() -> dict[str, Any] | None:
    """uvicorn's ``log_config``: ``None`` (leave logging alone, records reach our JSON
    handler) once ``configure_logging`` ran, else uvicorn's own default."""
    if any(getattr(h, "_hal_structured", False) for h in logging.getLogger().handlers):
        return None
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG
