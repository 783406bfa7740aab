"""docs/BENCHMARKS.md's generated blocks are what benchmarks/run.py writes from docs/benchmarks.json.

A figure typed into the page by hand, or a row that turned stale (a commit to the code it measures) without
the page being rewritten, fails here: `.venv/bin/python benchmarks/run.py --doc-only` rewrites the page.
"""

from __future__ import annotations

import difflib
import json
import re

import pytest

from benchmarks import run

pytestmark = pytest.mark.timeout(60)


def test_generated_blocks_match_benchmarks_json():
    text = run.DOC.read_text()
    expected = run.render_doc(text, run.load_figures())
    if expected != text:
        diff = "".join(
            list(difflib.unified_diff(text.splitlines(True), expected.splitlines(True), "page", "run.py"))[:40]
        )
        pytest.fail(f"docs/BENCHMARKS.md is not what benchmarks/run.py --doc-only writes:\n{diff}")


def test_every_recorded_table_is_on_the_page_and_every_row_dated():
    text = run.DOC.read_text()
    tables = json.loads(run.FIGURES.read_text())["tables"]
    for name, table in tables.items():
        assert run.TABLE_BEGIN.format(name) in text and run.TABLE_END.format(name) in text, name
        assert table["benchmark"] in run.CODE, name
        for row in table["rows"]:
            assert len(row["cells"]) == len(table["columns"]), (name, row)
            assert re.fullmatch(r"\d{4}-\d\d-\d\d( \d\d:\d\d)?", row["measured"]), (name, row)


def test_no_table_of_figures_outside_the_generated_blocks():
    """Outside the generated blocks the page is prose: a markdown table there is a hand-typed figure."""
    text = run.DOC.read_text()
    outside = re.sub(
        r"<!-- benchmarks/run\.py (writes from here|table \S+) -->.*?<!-- benchmarks/run\.py "
        r"(writes up to here|end of table \S+) -->",
        "",
        text,
        flags=re.S,
    )
    method = outside.split("\n## Method\n", 1)[0]  # module docstrings quoted under Method are the modules' own
    assert not re.search(r"^\| ?-{3}", method, flags=re.M)


def test_a_row_turns_stale_when_its_code_changes_after_its_commit():
    head = run.git("rev-parse", "HEAD")
    first = run.git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    assert "stale" not in run.provenance("planner", "2026-11-28", head[:10])
    assert f"stale: code changed since {first[:7]}" in run.provenance("planner", "2026-11-20", first[:10])


def test_add_row_appends_and_rewrites(tmp_path, monkeypatch):
    doc, figures = tmp_path / "B.md", tmp_path / "b.json"
    name = "t"
    figures.write_text(
        json.dumps(
            {
                "figures": {},
                "measured_at": {},
                "measured_commit": {},
                "tables": {name: {"benchmark": "planner", "columns": ["a", "b"], "rows": []}},
            }
        )
    )
    doc.write_text(f"x\n{run.TABLE_BEGIN.format(name)}\n{run.TABLE_END.format(name)}\ny\n")
    monkeypatch.setattr(run, "DOC", doc)
    monkeypatch.setattr(run, "FIGURES", figures)
    monkeypatch.setattr(run, "ROOT", tmp_path)
    head = run.git("rev-parse", "--short=10", "HEAD")
    assert run.add_row(name, ["1 s", "2"], "2026-11-28 04:00", head) == 0
    assert "| 1 s | 2 | 2026-11-28 04:00, " + head in doc.read_text()
    assert run.add_row(name, ["only one"], None, None) == 2
    assert len(json.loads(figures.read_text())["tables"][name]["rows"]) == 1


def test_ci_report_fails_on_a_crash_never_on_timing(monkeypatch, capsys):
    """`.ci/run`'s short benchmark: a figure ten times the recorded one is a report (exit 0); an exception is a
    defect (exit 1)."""
    slow = {key: 10 * 999.0 for key in run.CI_FIGURES}
    monkeypatch.setattr(run, "call", lambda name, **options: slow)
    assert run.ci_report() == 0
    assert "no timing fails the build" in capsys.readouterr().out
    monkeypatch.setattr(run, "call", lambda name, **options: {"error": "Traceback ...\nRuntimeError: boom"})
    assert run.ci_report() == 1
    assert "RuntimeError: boom" in capsys.readouterr().out
