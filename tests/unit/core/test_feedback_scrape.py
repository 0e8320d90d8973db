"""``--feedback-metrics`` (``hal.core.feedback.parse_scrape``, ``pick_scraped``): which
addresses a job may have its agent read, and which series of a Prometheus page become
its feedback."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.core.feedback import MAX_METRICS, ScrapeTarget, parse_scrape, pick_scraped


@pytest.mark.parametrize(
    ("text", "url", "names"),
    [
        ("http://localhost:9100/metrics", "http://localhost:9100/metrics", ()),
        (" http://127.0.0.1:8000/m#a, b ", "http://127.0.0.1:8000/m", ("a", "b")),
        ("https://127.3.4.5/metrics#", "https://127.3.4.5/metrics", ()),
        ("http://[::1]:9100/metrics#x", "http://[::1]:9100/metrics", ("x",)),
    ],
)
def test_a_loopback_url_is_taken_with_its_names(text: str, url: str, names: tuple[str]) -> None:
    target = parse_scrape(text)
    assert target == ScrapeTarget(url, names)
    assert parse_scrape(str(target)) == target  # kept as text, read back the same


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("http://10.0.0.5:9100/metrics", "loopback addresses only"),
        ("http://example.com/metrics", "loopback addresses only"),
        ("http://169.254.169.254/latest", "loopback addresses only"),
        ("http://localhost.example.com/", "loopback addresses only"),
        ("file:///etc/passwd", "not an http:// or https:// URL"),
        ("localhost:9100/metrics", "not an http:// or https:// URL"),
        ("http://user:pw@localhost/metrics", "user or password"),
        ("http://localhost:99999/metrics", "is not a URL"),
        ("http://localhost/m#bad-name", "is not allowed"),
        ("http://localhost/m#a,a", "twice"),
        ("http://localhost/m#" + ",".join(f"m{i}" for i in range(MAX_METRICS + 1)), "at most"),
    ],
)
def test_other_addresses_and_bad_names_are_refused(text: str, why: str) -> None:
    with pytest.raises(InvalidRequest, match=why) as err:
        parse_scrape(text)
    assert err.value.field == "feedback_metrics"


PAGE = """\
# HELP hal_feedback_samples_per_s what the job does
# TYPE hal_feedback_samples_per_s gauge
hal_feedback_samples_per_s 1830
# TYPE hal_feedback_latency_ms gauge
hal_feedback_latency_ms{quantile="0.5"} 4
hal_feedback_latency_ms{quantile="0.99"} 12.5
# TYPE hal_feedback_requests counter
hal_feedback_requests_total 99
# TYPE hal_feedback_nan gauge
hal_feedback_nan NaN
# TYPE queue gauge
queue{shard="a"} 3
queue 5
requests_total 7
"""


def test_without_names_the_prefixed_gauges_are_taken() -> None:
    # counters are not (a rate is the job's to give), nor values that are not finite;
    # of a labelled gauge the first sample
    assert pick_scraped(PAGE, ()) == {"latency_ms": 4.0, "samples_per_s": 1830.0}


def test_named_series_prefer_the_sample_without_labels() -> None:
    assert pick_scraped(PAGE, ("queue", "requests_total", "absent")) == {
        "queue": 5.0,
        "requests_total": 7.0,
    }


def test_at_most_the_metrics_a_job_may_have_are_taken() -> None:
    page = "".join(
        f"# TYPE hal_feedback_m{i:02} gauge\nhal_feedback_m{i:02} {i}\n" for i in range(40)
    )
    assert list(pick_scraped(page, ())) == [f"m{i:02}" for i in range(MAX_METRICS)]


def test_a_page_that_is_not_prometheus_text_is_an_error() -> None:
    with pytest.raises(ValueError):
        pick_scraped("<html><body>not found</body></html>\n", ())
