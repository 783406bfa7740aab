"""A static files finder that serves plotly.js from the installed plotly package.

Clusters are often offline, so the dashboard never loads plotly.js from a CDN;
the copy that ships inside the pinned `plotly` Python package is served (and
collected by collectstatic) as ``cluster_health/vendor/plotly.min.js``, so the
JavaScript and the Python package can never disagree on the version.
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PREFIX = "cluster_health/vendor"
FILENAME = "plotly.min.js"


def _package_data() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    def check(self, **kwargs):
        if not (_package_data() / FILENAME).is_file():
            from django.core.checks import Error

            return [Error(f"{FILENAME} not found in the plotly package", id="cluster_health.E001")]
        return []

    def find(self, path, find_all=False, **kwargs):
        find_all = find_all or kwargs.get("all", False)
        if path != f"{PREFIX}/{FILENAME}":
            return [] if find_all else None
        full = str(_package_data() / FILENAME)
        return [full] if find_all else full

    def list(self, ignore_patterns):
        storage = FileSystemStorage(location=str(_package_data()))
        storage.prefix = PREFIX
        yield FILENAME, storage
