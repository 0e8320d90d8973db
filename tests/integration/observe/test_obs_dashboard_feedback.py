"""The dashboard's job view shows what a job reported about itself and how it behaves,
and the Traffic tab the learned interference matrix, in headless Chromium (Debian's
``chromium`` driven by Playwright) against a real server and a real agent.

The job is a latency-sensitive service that reports its p99 latency four times with
``hal feedback`` (goal ``min``) and then waits; its agent samples its profile until the
server classes it. The server starts from an interference model it learnt before (its
``harmonic/dissonance.json``, as after a restart): memory-bound jobs slowed 1.8x by
each other over 40 outcomes. Screenshots go to ``$HAL_TEST_OUTPUT_DIR/dashboard``
(default: pytest's temporary directory)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest_helpers import ARGS, BROWSER_MARKS, CHROMIUM

from hal.core.dissonance import DissonanceModel, Outcome
from hal.testing.live import LiveServer, wait_until

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
pytestmark = BROWSER_MARKS
REPORTED = (12.5, 14.0, 11.25, 13.0)  # p99_ms, in order
LEARNT = 40  # memory beside memory outcomes in the model the server starts from


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("HAL_TEST_OUTPUT_DIR")
    path = Path(base) / "dashboard" if base else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def learnt_model() -> DissonanceModel:
    model = DissonanceModel()
    for _ in range(LEARNT):
        model.observe(Outcome("memory", {"memory": 1.0}, 1.8, biased=False))
    return model


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    """The server (one agent of 2 CPUs) and the service job, running and classed, its
    four reports in."""
    data = tmp_path_factory.mktemp("hal-feedback-ui")
    kept = data / "harmonic" / "dissonance.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"model": learnt_model().export()}))
    work = tmp_path_factory.mktemp("work")
    report = "".join(
        f"{sys.executable} -m hal.cli.main feedback p99_ms={v} || exit 1\n" for v in REPORTED
    )
    script = work / "service.sh"
    script.write_text(
        "#!/bin/bash\n#HAL --feedback-goal=p99_ms:min\n#HAL --latency-sensitive\n"
        f"{report}exec sleep 600\n"
    )
    with LiveServer(data) as live, live.agents(1, cpus=2):
        done = live.cli("sbatch", "--parsable", "-J", "inference", str(script), cwd=work)
        assert done.returncode == 0, done.stderr
        job_id = int(done.stdout)
        with live.client() as c:
            wait_until(
                lambda: (
                    len(c.job_feedback(job_id).metrics[:1])
                    and c.job_feedback(job_id).metrics[0].count == len(REPORTED)
                ),
                timeout=60,
                message="the service's four reports",
            )
            wait_until(
                lambda: c.job(job_id).profile_class is not None,
                timeout=90,
                message="the service's profile to class it",
            )
        try:
            yield live, job_id
        finally:
            live.cli("scancel", str(job_id))


@pytest.fixture(scope="module")
def page(service: tuple[LiveServer, int]) -> Iterator[Any]:
    live, _ = service
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            opened = browser.new_page(viewport={"width": 1366, "height": 768})
            opened.set_default_timeout(15_000)
            opened.goto(f"{live.url}/ui#token={live.token}")
            yield opened
        finally:
            browser.close()


def test_the_job_view_shows_the_reported_series_and_the_profile(
    page: Any, service: tuple[LiveServer, int], shots: Path
) -> None:
    live, job_id = service
    with live.client() as c:
        info = c.job(job_id)
    page.click('nav a[data-tab="queue"]')
    page.click('#queue-table tbody tr:has-text("inference")')
    metric = '#d-feedback .feedback-metric[data-metric="p99_ms"]'
    page.wait_for_selector(metric)
    assert page.get_attribute(metric, "data-goal") == "min"
    assert page.inner_text(f"{metric} .goal") == "lower is better"
    assert page.inner_text(f"{metric} .latest") == "13"
    assert "4 reports" in page.inner_text(metric)
    chart = f"{metric} svg.spark"
    assert page.get_attribute(chart, "data-points") == str(len(REPORTED))
    coords = page.get_attribute(f"{chart} polyline", "points").split()
    ys = [float(p.split(",")[1]) for p in coords]
    # lower on the chart is a lower value: 11.25 lowest, 14 highest
    assert len(ys) == 4 and ys[2] == max(ys) and ys[1] == min(ys)
    assert page.inner_text(f"{metric} .range").startswith("11.25 to 14, ")

    assert page.inner_text("#d-profile-class") == f"class {info.profile_class}, latency-sensitive"
    profile = info.profile
    assert profile is not None
    cpu = page.inner_text('#d-profile dd[data-profile="cpu"]')
    assert cpu.endswith(" CPUs busy") and float(cpu.split()[0]) < 1.0  # it sleeps
    assert "resident" in page.inner_text('#d-profile dd[data-profile="memory"]')
    assert " read, " in page.inner_text('#d-profile dd[data-profile="io"]')
    assert page.inner_text('#d-profile dd[data-profile="pressure"]').startswith(
        "cpu " if profile.cpu_pressure is not None else "— (no pressure-stall"
    )
    assert page.inner_text('#d-profile dd[data-profile="source"]').endswith(profile.source)
    page.screenshot(path=str(shots / "job-feedback-profile.png"), full_page=True)


def test_a_job_that_reported_nothing_says_how_to(
    page: Any, service: tuple[LiveServer, int], tmp_path: Path
) -> None:
    live, _ = service
    done = live.cli("sbatch", "--parsable", "-J", "quiet", "--hold", "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page.click('nav a[data-tab="queue"]')
    page.click('#queue-table tbody tr:has-text("quiet")')
    page.wait_for_function(
        "document.querySelector('#d-id').textContent === "
        f"{done.stdout.strip()!r} && /none reported/.test("
        "document.querySelector('#d-feedback').textContent)"
    )
    assert "hal feedback NAME=VALUE" in page.inner_text("#d-feedback")
    assert page.inner_text("#d-profile-class") == "no class yet"
    assert page.inner_text("#d-profile") == "Measured\nsampled while it runs"
    page.click("#close-detail")


def test_the_traffic_tab_shows_the_learnt_matrix_with_its_counts(page: Any, shots: Path) -> None:
    page.click('nav a[data-tab="traffic"]')
    cell = '#dissonance-matrix td[data-cell="memory memory"]'
    page.wait_for_selector(cell)
    heads = page.eval_on_selector_all(
        "#dissonance-matrix thead th", "ts => ts.map(t => t.textContent)"
    )
    assert heads[1:] == ["cpu", "memory", "io", "network", "light"]
    assert len(page.query_selector_all("#dissonance-matrix td[data-cell]")) == 25
    assert page.get_attribute(cell, "data-observations") == str(LEARNT)
    shown = float(page.get_attribute(cell, "data-slowdown"))
    assert 1.7 < shown < 1.8  # the ridge pulls a little toward the prior
    assert page.inner_text(cell) == f"{shown:.2f}× ({LEARNT})"
    assert "clash" in (page.get_attribute(cell, "class") or "")
    never = '#dissonance-matrix td[data-cell="io cpu"]'
    assert page.get_attribute(never, "data-observations") == "0"
    assert page.inner_text(never) == "1.05× (0)"  # the prior
    info = page.inner_text("#dissonance-info")
    assert info == "0 outcomes learnt since the server started; pairs never seen: 1.05×"
    page.screenshot(path=str(shots / "dissonance-matrix.png"), full_page=True)
