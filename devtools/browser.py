"""The headless Chromium the browser tests and the dashboard benchmark drive (Debian's, never a download)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("CLUSTER_HEALTH_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
