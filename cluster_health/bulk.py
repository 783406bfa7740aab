"""Conditional UPDATEs over many rows in one statement, reporting which rows they changed.

``conditional_update`` writes per-row values to every row of a model that still
matches a condition (``status IN open AND half_a IS NULL``, say) and returns the
primary keys it changed, so a batch keeps the one-row claim's guarantee: a row
that no longer matches is left alone and the caller knows it. One statement,
``UPDATE ... FROM (VALUES ...) ... RETURNING``, which PostgreSQL and SQLite
(3.35 and later) both run; per-row values are cast to the column's type.
"""

from __future__ import annotations

from django.db import connection

CHUNK = 500  # rows per statement: well under SQLite's limit on bound parameters


def conditional_update(model, rows: dict[int, dict], *, where: str = "", where_params=(),
                       constants: dict | None = None) -> set[int]:
    """Set ``rows[pk]`` (field -> value) on each row ``pk`` that also satisfies ``where``.

    ``where`` is SQL over the table's columns (qualified as ``t.``); ``constants`` are
    fields given the same value on every row (times, statuses). Every row must name the
    same fields. Returns the primary keys updated.
    """
    if not rows:
        return set()
    table = connection.ops.quote_name(model._meta.db_table)
    pk_col = connection.ops.quote_name(model._meta.pk.column)
    names = list(next(iter(rows.values())))
    fields = [model._meta.get_field(name) for name in names]
    constants = constants or {}
    const_fields = [model._meta.get_field(name) for name in constants]
    # VALUES columns are named column1, column2, ... by both databases; column1 is the key.
    assignments = [f"{connection.ops.quote_name(f.column)} = v.column{i + 2}" for i, f in enumerate(fields)]
    assignments += [f"{connection.ops.quote_name(f.column)} = %s" for f in const_fields]
    const_params = [f.get_db_prep_save(constants[f.name], connection) for f in const_fields]
    casts = ", ".join(f"CAST(%s AS {f.db_type(connection)})" for f in fields)
    condition = f" AND ({where})" if where else ""
    done: set[int] = set()
    items = list(rows.items())
    with connection.cursor() as cursor:
        for start in range(0, len(items), CHUNK):
            chunk = items[start: start + CHUNK]
            values = ", ".join(f"(CAST(%s AS bigint), {casts})" for _ in chunk)
            params = []
            for pk, row in chunk:
                params.append(pk)
                params += [f.get_db_prep_save(row[f.name], connection) for f in fields]
            cursor.execute(
                f"UPDATE {table} AS t SET {', '.join(assignments)} "
                f"FROM (VALUES {values}) AS v "
                # The key list as well as the join: the planner then looks rows up by key
                # instead of scanning the table to join it with the VALUES list.
                f"WHERE t.{pk_col} = v.column1 AND t.{pk_col} IN ({', '.join(['%s'] * len(chunk))})"
                f"{condition} RETURNING {pk_col}",
                [*const_params, *params, *(pk for pk, _row in chunk), *where_params])
            done.update(pk for (pk,) in cursor.fetchall())
    return done
