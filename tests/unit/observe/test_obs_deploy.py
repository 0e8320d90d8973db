"""What ships under deploy/: the Grafana dashboard (static checks) and the Prometheus
alert rules (promtool check + unit tests)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "hal-dashboard.json"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package 'prometheus')"
)


def test_the_grafana_dashboard_is_classic_json_with_a_datasource_input() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["schemaVersion"] >= 36 and dash["uid"] == "hal-scheduler"
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    boxes = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        g = panel["gridPos"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & boxes, f"panel {panel['title']} overlaps another"
        boxes |= cells
        for target in panel["targets"]:
            assert "hal_" in target["expr"]


def test_the_provisioning_files_are_valid_yaml() -> None:
    for path in (DEPLOY / "grafana" / "provisioning").rglob("*.yml"):
        doc = yaml.safe_load(path.read_text())
        assert doc["apiVersion"] == 1, path


@needs_promtool
def test_the_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    rules = DEPLOY / "prometheus"
    for args in (["check", "rules", "hal-alerts.yml"], ["test", "rules", "hal-alerts.test.yml"]):
        done = subprocess.run(["promtool", *args], cwd=rules, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
