"""The plane's settings from the environment."""

from __future__ import annotations

from hal.observe.config import ObserveConfig


def test_defaults_and_overrides() -> None:
    assert ObserveConfig.from_env({}) == ObserveConfig()
    cfg = ObserveConfig.from_env(
        {
            "HAL_METRICS": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "HAL_ALERT_WEBHOOKS": "http://a/hook, http://b/hook",
            "HAL_ALERT_NODE_DOWN_S": "5",
        }
    )
    assert not cfg.metrics and cfg.tracing
    assert cfg.otlp_endpoint == "http://collector:4318/v1/traces"
    assert cfg.webhooks == ("http://a/hook", "http://b/hook")
    assert cfg.node_down_s == 5.0


def test_the_traces_specific_endpoint_is_used_as_is() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"}
    assert ObserveConfig.from_env(env).otlp_endpoint == "http://c:4318/custom"
