"""Where tests keep what a person may want to look at after a run: screenshots, stack and test-bed logs."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("CLUSTER_HEALTH_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=True)
