"""The plane's settings from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.core.errors import InvalidRequest
from hal.observe.config import ObserveConfig


def test_defaults_and_overrides() -> None:
    assert ObserveConfig.from_env({}) == ObserveConfig()
    cfg = ObserveConfig.from_env(
        {
            "HAL_METRICS": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "HAL_ALERT_WEBHOOKS": "http://a/hook, http://b/hook",
            "HAL_ALERT_NODE_DOWN_S": "5",
            "HAL_ALERT_NODE_SLOW_FACTOR": "3",
            "HAL_ALERT_NODE_SLOW_WINDOW_S": "3600",
            "HAL_LOOP_STALL_LOG_S": "0.2",
        }
    )
    assert not cfg.metrics and cfg.tracing
    assert cfg.otlp_endpoint == "http://collector:4318/v1/traces"
    assert cfg.webhooks == ("http://a/hook", "http://b/hook")
    assert cfg.node_down_s == 5.0
    assert (cfg.node_slow_factor, cfg.node_slow_min_jobs, cfg.node_slow_window_s) == (3, 5, 3600)
    assert cfg.loop_stall_log_s == 0.2 and ObserveConfig().loop_stall_log_s == 0.0  # (off)


def test_the_slow_pass_log_is_two_seconds_unless_set() -> None:
    """At 10,000 nodes passes run 1.7–2.1 s by design: 2 s logs the ones past that."""
    assert ObserveConfig().slow_pass_log_s == 2.0
    assert ObserveConfig.from_env({"HAL_SLOW_PASS_LOG_S": ""}).slow_pass_log_s == 2.0
    assert ObserveConfig.from_env({"HAL_SLOW_PASS_LOG_S": "0.5"}).slow_pass_log_s == 0.5
    assert ObserveConfig.from_env({"HAL_SLOW_PASS_LOG_S": "0"}).slow_pass_log_s == 0.0  # off


def test_the_traces_specific_endpoint_is_used_as_is() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"}
    assert ObserveConfig.from_env(env).otlp_endpoint == "http://c:4318/custom"


@pytest.mark.parametrize(
    ("name", "text", "hint"),
    [
        ("HAL_ALERT_FLAP_COUNT", "3.5", "whole number of at least 1"),
        ("HAL_ALERT_NODE_FAIL_MIN_JOBS", "0", "whole number of at least 1"),
        ("HAL_ALERT_NODE_SLOW_MIN_JOBS", "2.5", "whole number of at least 1"),
        ("HAL_ALERT_NODE_SLOW_FACTOR", "0.5", "number of at least 1"),  # would flag fast nodes
        ("HAL_ALERT_NODE_SLOW_WINDOW_S", "6h", "number of at least 0"),
        ("HAL_ALERT_NODE_DOWN_S", "1m", "number of at least 0"),
        ("HAL_ALERT_QUEUE_STUCK_S", "-5", "number of at least 0"),
        ("HAL_OUTPUT_RELAY_TIMEOUT_S", "nan", "number of at least 0"),
        ("HAL_LOOP_STALL_LOG_S", "-0.2", "number of at least 0"),
        ("HAL_SLOW_PASS_LOG_S", "-1", "number of at least 0"),
        ("HAL_SLOW_PASS_LOG_S", "2s", "number of at least 0"),
        ("HAL_SLOW_PASS_LOG_S", "inf", "number of at least 0"),
        ("HAL_PLUGIN_TIMING_INTERVAL_S", "often", "set it to a number,"),
        ("HAL_LOG_LEVEL", "verbose", "debug, info, warning, error"),
        ("HAL_LOG_FORMAT", "text", "json, console"),
        ("HAL_METRICS", "disabled", "use 0 (off) or 1 (on)"),  # was taken as on
        ("HAL_TRACING", "nope", "use 0 (off) or 1 (on)"),
    ],
)
def test_a_malformed_value_names_the_variable_and_what_to_set(
    name: str, text: str, hint: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ObserveConfig.from_env({name: text})
    assert caught.value.message.startswith(f"{name}={text!r} is not valid")
    assert hint in caught.value.message
    assert caught.value.field == name


def test_empty_values_mean_the_default_and_negative_timing_means_never() -> None:
    env = {"HAL_ALERT_NODE_DOWN_S": "", "HAL_ALERT_FLAP_COUNT": " ", "HAL_LOG_LEVEL": "DEBUG"}
    cfg = ObserveConfig.from_env({**env, "HAL_PLUGIN_TIMING_INTERVAL_S": "-1"})
    assert cfg.node_down_s == 60.0 and cfg.flap_count == 3 and cfg.log_level == "debug"
    assert cfg.plugin_timing_interval_s == -1.0


def test_hal_up_stops_with_the_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``HAL_ALERT_FLAP_COUNT=3.5 hal up`` printed a ValueError traceback that did not
    name the variable."""
    from hal.cli.main import main

    monkeypatch.setenv("HAL_ALERT_FLAP_COUNT", "3.5")
    monkeypatch.setenv("HOME", str(tmp_path))  # nothing may start, nor write credentials
    assert main(["up", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hal: error: HAL_ALERT_FLAP_COUNT='3.5' is not valid")
    assert "Traceback" not in err


@pytest.mark.parametrize("urls", ["alerts.example.org/hook", "http://a/hook,mailto:ops@x"])
def test_a_webhook_that_is_not_a_url_stops_the_server_at_start(urls: str) -> None:
    """A webhook typo was only found at the first alert, as a failed delivery logged."""
    with pytest.raises(InvalidRequest) as caught:
        ObserveConfig.from_env({"HAL_ALERT_WEBHOOKS": urls})
    assert "is not an http(s) URL" in caught.value.message
    assert caught.value.field == "HAL_ALERT_WEBHOOKS"


def test_on_and_off_take_the_usual_words() -> None:
    for word, on in (("1", True), ("Yes", True), ("on", True), ("false", False), ("OFF", False)):
        cfg = ObserveConfig.from_env({"HAL_METRICS": word, "HAL_TRACING": word})
        assert (cfg.metrics, cfg.tracing) == (on, on)
