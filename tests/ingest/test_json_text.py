"""JSON on the ingest path (cluster_health/jsontext.py): orjson's reading and writing, the standard library's
for what orjson refuses, so that no message reads, and no half is written, differently from json."""

import json
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from cluster_health import jsontext
from cluster_health.queues import messages
from cluster_health.queues.dispatch import task_message

POSTGRES = connection.vendor == "postgresql"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [1.5, -2e-07, "x\\u00e9\\ud83d\\ude00"], "c": null, "d": {"e": true}}',
        "[1e308, 0.1, 123456789012345678]",
        '{"a": 1, "a": 2}',  # the last one counts, in both
    ],
)
def test_what_orjson_reads_it_reads_as_json_does(text):
    assert jsontext.loads(text) == json.loads(text)
    assert jsontext.loads(text.encode()) == json.loads(text)


def test_what_orjson_refuses_is_read_by_the_standard_library():
    assert math.isnan(jsontext.loads("NaN"))
    assert jsontext.loads('"\\ud800"') == "\ud800"  # a lone surrogate: the contract refuses it later, by name
    assert jsontext.loads("123456789012345678901234567890") == 123456789012345678901234567890
    with pytest.raises(ValueError):
        jsontext.loads(b"{not json")


def test_writing_matches_what_json_and_django_would_mean():
    value = {"half": {"busbw_gbps": 12.25, "name": "nodé", "n": [1, 2]}, 3: "int key"}
    assert json.loads(jsontext.dumps(value)) == json.loads(json.dumps(value))
    at = datetime(2026, 11, 28, 12, 0, 0, 123456, tzinfo=UTC)
    written = json.loads(jsontext.dumps({"at": at, "d": Decimal("1.50"), "t": timedelta(seconds=90)}))
    assert datetime.fromisoformat(written["at"]) == at  # microseconds kept
    assert written["d"] == "1.50" and written["t"] == "P0DT00H01M30S"
    # A lone surrogate orjson cannot write: the standard library's escape, as before (the database refuses it).
    assert jsontext.dumps({"s": "\ud800"}) == '{"s": "\\ud800"}'


def test_a_task_message_reads_back_through_the_one_reader():
    kwargs = {"result": {"probe_id": 7, "node": "node-é", "evidence": {"x": [1.0, 2.5]}}, "auth": {"kid": "k1"}}
    task, read, expired = messages.decode(task_message("server.result", "server.ingest.n1", kwargs, 60))
    assert (task, read, expired) == ("server.result", kwargs, False)
    with pytest.raises(ValueError, match="not a task message"):
        messages.decode(b'{"body": "!!!", "properties": {"body_encoding": "base64"}}')


@pytest.mark.django_db
@pytest.mark.skipif(not POSTGRES, reason="column compression is PostgreSQL's (its leg runs this)")
def test_the_pair_tables_json_is_compressed_with_lz4_where_the_server_has_it():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        if not cursor.fetchone()[0]:
            pytest.skip("this PostgreSQL was built without lz4: the migration keeps pglz")
        cursor.execute(
            "SELECT attname, attcompression FROM pg_attribute WHERE attrelid = 'cluster_health_pairprobe'::regclass"
            " AND attname IN ('half_a', 'half_b', 'evidence', 'sizes')"
        )
        assert dict(cursor.fetchall()) == {"half_a": "l", "half_b": "l", "evidence": "l", "sizes": "l"}


@pytest.mark.django_db
def test_a_json_column_read_as_text_is_the_value_the_field_reads():
    """What the sweep's close reads through jsontext.column (orjson) is what the JSONField gives, on either database."""
    from cluster_health.models import Node, PairProbe, Sweep

    sweep = Sweep.objects.create(kind="connectivity", nodes=["jt-a", "jt-b"], status="running")
    a, b = (Node.objects.create(name=name, address=f"10.7.0.{i}") for i, name in enumerate(("jt-a", "jt-b"), 1))
    values = [
        None,
        {"tcp": {"RetransSegs": 3, "retrans_pct": 0.25}, "uplink": None, "big": 123456789012345678901234567890},
        [{"bytes": 4, "busbw_gbps": 1e-07, "ok": True}, {"bytes": 67108864, "busbw_gbps": 12.5, "ok": False}],
        {"text": "x\u00e9\U0001f600", "nested": [[1, 2], {"k": "v"}], "empty": {}},
    ]
    for i, value in enumerate(values):
        PairProbe.objects.create(sweep=sweep, round=i, node_a=a, node_b=b, status="ok", evidence=value, sizes=value)
    rows = PairProbe.objects.filter(sweep=sweep).order_by("round")
    read = [
        (jsontext.value_of(ev), jsontext.value_of(sz))
        for ev, sz in rows.annotate(ev=jsontext.column("evidence"), sz=jsontext.column("sizes")).values_list("ev", "sz")
    ]
    assert read == list(rows.values_list("evidence", "sizes")) == [(v, v) for v in values]
