"""JSON log lines carry service, level, timestamp, job id, node and trace id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from hal.observe.logging import configure_logging, get_logger, uvicorn_log_config


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("info", "json", stream=out)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_stdlib_records_with_extra_fields_become_json(stream: io.StringIO) -> None:
    logging.getLogger("hal.observe").info(
        "job started", extra={"job_id": "12", "node": "n1", "trace_id": "ab" * 16}
    )
    logging.getLogger("hal.observe").debug("not shown at info")
    [line] = lines(stream)
    assert line["event"] == "job started"
    assert line["level"] == "info" and line["service"] == "hal-server"
    assert line["job_id"] == "12" and line["node"] == "n1" and line["trace_id"] == "ab" * 16
    assert str(line["timestamp"]).endswith("Z")


def test_structlog_records_get_the_current_spans_ids(stream: io.StringIO) -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        get_logger("hal.test").warning("slow", duration_s=1.5)
    [line] = lines(stream)
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["duration_s"] == 1.5


def test_uvicorn_keeps_its_own_logging_unless_ours_is_configured(stream: io.StringIO) -> None:
    assert uvicorn_log_config() is None


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("loud")
