"""Every file or folder that README.md and docs/*.md name must exist: `python -m devtools.doc_paths`.

A mention is a relative path that ends in a file suffix (``cluster_health/ingest/consumer.py``,
``docs/GPU.md``, a bare ``heatmap.js``), starts with a top-level entry of the repository
(``agents/probe``) or ends with a slash (``cluster_health/core/``). Words such as ``GB/s``
or ``Gloo/NCCL`` are none of these. A path is looked up from the repository root and, in a
doc under docs/, from docs/ as well (a Markdown link there is relative to it); a bare name
must be the name of some file in the repository. Absolute paths, URLs, API routes and
globs are skipped, as are the few names below that are not files of the repository.

Prints each miss as ``DOC:LINE: PATH`` and the count; exits 1 when any path is missing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = ("py", "md", "js", "css", "html", "json", "yml", "yaml", "toml", "txt", "ini", "cfg", "sh", "service")
# A run of path characters; is_path() decides whether it names a file or a folder.
PATH = re.compile(r"(?<![\w/.:@~$<{*-])(\.?[A-Za-z0-9_][\w.-]*(?:/[\w.-]+)*/?)")
BARE = re.compile(r"^[\w-]+(?:\.[\w-]+)*\.(?:" + "|".join(SUFFIXES) + r")$")
# Named in the docs, but examples, routes or libraries: not files of the repository.
NOT_IN_REPO = {
    "keys/",  # `manage.py enroll --out keys/`: an example output folder
    "deploy/server.env",  # the operator's own settings (gitignored), from the example beside it
    "racks.txt",  # an example topology file
    "before.json",  # `manage.py sweep --json > before.json`: an example
    "after.json",
    "SPEC.json",  # `python -m agents.probe SPEC.json`: a placeholder
    "state.json",  # a sweep page's route, sweeps/<id>/state.json
    "plotly.js",  # the library, served from the installed plotly package
    "fault_timings.json",  # written by the fault tests under test-artifacts/
    "dist/",  # `pip wheel ... -w dist/`: the wheel's output folder
}
# Folders made at run time, and everything under them.
MADE_AT_RUN_TIME = (
    "var/",  # the SQLite database, collected static files, the test bed's state (scripts/run, scripts/testbed)
    "test-artifacts/",  # what a test run leaves (CLUSTER_HEALTH_TEST_ARTIFACTS)
    ".venv/",  # the virtualenv scripts/setup makes
)


def repo_files() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def is_path(path: str, top: set[str]) -> bool:
    """Whether a run of path characters names a file or folder (see the module's docstring)."""
    segments = path.rstrip("/").split("/")
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", segments[0]):  # $CLUSTER_HEALTH_BASE_URL/nodes/...: a variable
        return False
    if BARE.match(segments[-1]):
        return True
    if "/" in path.rstrip("/") and segments[0] in top:
        return True
    # A folder: agents/probe/, but not the s/ of s/^gpu-/node/.
    return path.endswith("/") and all(len(s) > 1 and not s.endswith("-") for s in segments)


def mentions(text: str, top: set[str]) -> list[tuple[int, str]]:
    """(line number, path) of every mention of a file or folder in a Markdown text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"[a-z][a-z0-9+.-]*://\S+", " ", line)  # URLs, database and broker URLs
        for m in PATH.finditer(line):
            path = m.group(1).rstrip(".")
            if line[m.start(1) + len(path) : m.start(1) + len(path) + 1] in ("<", "{", "(", "*"):
                continue  # an API route, a call or a glob: sweeps/<id>/pairs, test_probe_*.py
            if is_path(path, top):
                found.append((number, path))
    return found


def exists(path: str, doc: Path, files: set[str], names: set[str]) -> bool:
    if path in NOT_IN_REPO or path.rstrip("/") in NOT_IN_REPO or (path + "/").startswith(MADE_AT_RUN_TIME):
        return True
    if "/" not in path:
        return path in names
    bases = [ROOT, doc.parent] if doc.parent != ROOT else [ROOT]
    for base in bases:
        candidate = (base / path).resolve()
        try:
            relative = candidate.relative_to(ROOT).as_posix()
        except ValueError:
            continue
        if relative in files or any(f.startswith(relative + "/") for f in files):
            return True
    return False


def main() -> int:
    files = repo_files()
    names = {f.rsplit("/", 1)[-1] for f in files}
    top = {f.split("/", 1)[0] for f in files}
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = checked = 0
    for doc in docs:
        for number, path in mentions(doc.read_text(encoding="utf-8"), top):
            checked += 1
            if not exists(path, doc, files, names):
                missing += 1
                print(f"{doc.relative_to(ROOT)}:{number}: {path}")
    print(f"{checked} paths named in {len(docs)} docs, {missing} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
