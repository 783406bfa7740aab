"""deploy/prometheus: the alerting rules load in promtool, fire as their unit tests say, and use real series."""

import re
import subprocess
from pathlib import Path

from tests.support.action_fixtures import require_tool

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "cluster-health.rules.yml"
METRICS_SOURCE = Path(__file__).resolve().parents[2] / "cluster_health" / "web" / "metrics.py"


def promtool(*args):
    return subprocess.run([require_tool("promtool"), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60)


def test_it_passes_promtool_check_rules():
    run = promtool("check", "rules", RULES.name)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_it_fires_the_rules_as_their_unit_tests_expect():
    run = promtool("test", "rules", "cluster-health.rules.test.yml")
    assert run.returncode == 0, run.stdout + run.stderr


def test_it_only_uses_series_that_metrics_exports():
    used = set(re.findall(r"\bcluster_health_[a-z_]+", RULES.read_text()))
    exported = set(re.findall(r"\bcluster_health_[a-z_]+", METRICS_SOURCE.read_text()))
    assert used and used <= exported, used - exported
