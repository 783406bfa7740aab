"""Conditional UPDATEs over many rows in one statement, reporting which rows they changed.

``conditional_update`` writes per-row values to every row of a model that still
matches a condition (``status IN open AND half_a IS NULL``, say) and returns the
primary keys it changed, so a batch keeps the one-row claim's guarantee: a row
that no longer matches is left alone and the caller knows it. ``update_returning``
does the same and also hands back columns of the rows as updated (the other half
of a pair, say), which saves reading them again.

One statement per chunk: on PostgreSQL ``UPDATE ... FROM jsonb_to_recordset(%s)
... RETURNING``: the rows travel as one JSON document, so the query text is short
whatever the number of rows and the driver quotes one string, not a parameter
per value; elsewhere (SQLite 3.35 and
later) ``UPDATE ... FROM (VALUES ...) ... RETURNING`` with per-row values cast to
the column's type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import JSONField

from cluster_health import jsontext

CHUNK = 500  # rows per VALUES statement: well under SQLite's limit on bound parameters
RECORDSET_CHUNK = 5000  # rows per statement on PostgreSQL


def conditional_update(
    model, rows: dict[int, dict], *, where: str = "", where_params=(), constants: dict | None = None
) -> set[int]:
    """Set ``rows[pk]`` (field -> value) on each row ``pk`` that also satisfies ``where``.

    ``where`` is SQL over the table's columns (qualified as ``t.``); ``constants`` are
    fields given the same value on every row (times, statuses). Every row must name the
    same fields. Returns the primary keys updated.
    """
    return set(update_returning(model, rows, where=where, where_params=where_params, constants=constants))


def update_returning(
    model,
    rows: dict[int, dict],
    *,
    where: str = "",
    where_params=(),
    constants: dict | None = None,
    returning: tuple[str, ...] = (),
) -> dict[int, tuple]:
    """Like ``conditional_update``; returns ``{pk: (values of the fields in returning)}`` for the rows updated.

    Returned JSON fields are decoded; other values come as the driver gives them.
    """
    if not rows:
        return {}
    meta = model._meta
    qn = connection.ops.quote_name
    names = list(next(iter(rows.values())))
    fields = [meta.get_field(name) for name in names]
    constants = constants or {}
    const_fields = [meta.get_field(name) for name in constants]
    back = [meta.get_field(name) for name in returning]
    parts = _Statement(
        table=qn(meta.db_table),
        pk=f"t.{qn(meta.pk.column)}",
        constant_sets=[f"{qn(f.column)} = %s" for f in const_fields],
        constant_params=[f.get_db_prep_save(constants[f.name], connection) for f in const_fields],
        condition=f" AND ({where})" if where else "",
        where_params=list(where_params),
        # Unqualified: SQLite's RETURNING takes no table alias (the new-values columns are c0, c1, ...).
        returning=", ".join([qn(meta.pk.column), *(qn(f.column) for f in back)]),
    )
    build = _recordset if connection.vendor == "postgresql" else _values
    size = RECORDSET_CHUNK if connection.vendor == "postgresql" else CHUNK
    items = list(rows.items())
    done: dict[int, tuple] = {}
    decoders = [isinstance(f, JSONField) for f in back]
    with connection.cursor() as cursor:
        for start in range(0, len(items), size):
            sql, params = build(parts, fields, items[start : start + size])
            cursor.execute(sql, params)
            for pk, *values in cursor.fetchall():
                done[pk] = tuple(
                    jsontext.loads(v) if is_json and isinstance(v, str) else v for is_json, v in zip(decoders, values)
                )
    return done


@dataclass
class _Statement:
    """The parts of the UPDATE that do not depend on the rows."""

    table: str  # quoted table name
    pk: str  # the primary key column, as t.<column>
    constant_sets: list[str]  # "<column> = %s" for each constant field
    constant_params: list[Any]  # their values, prepared for the database
    condition: str  # " AND (<where>)", or ""
    where_params: list[Any]
    returning: str  # the RETURNING column list

    def sql(self, assignments: list[str], source: str, key_filter: str) -> str:
        return (
            f"UPDATE {self.table} AS t SET {', '.join([*assignments, *self.constant_sets])} "
            # The key list as well as the join: the planner then looks rows up by key
            # instead of scanning the table to join it with the new values.
            f"FROM {source} WHERE {self.pk} = v.c0 AND {key_filter}{self.condition} RETURNING {self.returning}"
        )


def _recordset(st: _Statement, fields, chunk) -> tuple[str, list]:
    qn = connection.ops.quote_name
    # JSON values stay JSON; the rest as the column would be written.
    prep = [(f"c{i}", f, isinstance(f, JSONField)) for i, f in enumerate(fields, start=1)]
    rows = [
        {
            "c0": pk,
            **{
                key: row[f.name] if is_json else f.get_db_prep_save(row[f.name], connection) for key, f, is_json in prep
            },
        }
        for pk, row in chunk
    ]
    columns = ", ".join(["c0 bigint", *(f"{key} {f.db_type(connection)}" for key, f, _j in prep)])
    assignments = [f"{qn(f.column)} = v.{key}" for key, f, _j in prep]
    sql = st.sql(assignments, f"jsonb_to_recordset(%s::jsonb) AS v({columns})", f"{st.pk} = ANY(%s::bigint[])")
    return sql, [
        *st.constant_params,
        jsontext.dumps(rows),
        [pk for pk, _row in chunk],
        *st.where_params,
    ]


def _values(st: _Statement, fields, chunk) -> tuple[str, list]:
    qn = connection.ops.quote_name
    casts = ", ".join(f"CAST(%s AS {f.db_type(connection)})" for f in fields)
    values = ", ".join(f"(CAST(%s AS bigint), {casts})" for _ in chunk)
    width = len(fields) + 1
    # VALUES columns are named column1, column2, ... by SQLite; rename them c0, c1, ...
    source = f"(SELECT {', '.join(f'column{i + 1} AS c{i}' for i in range(width))} FROM (VALUES {values})) AS v"
    assignments = [f"{qn(f.column)} = v.c{i}" for i, f in enumerate(fields, start=1)]
    params = []
    for pk, row in chunk:
        params.append(pk)
        params += [f.get_db_prep_save(row[f.name], connection) for f in fields]
    sql = st.sql(assignments, source, f"{st.pk} IN ({', '.join(['%s'] * len(chunk))})")
    return sql, [*st.constant_params, *params, *(pk for pk, _row in chunk), *st.where_params]
