"""Set-based writes on PostgreSQL, for the tick: rows from Python lists, one JSON document per
table (`json_populate_recordset`), with ids allocated up front, so a batch's occurrences,
conversations, runs and their first transcript entries go in one statement instead of a model
instance per row.

The column list comes from the model's fields: a field the caller gives no values for gets its
default, so a field added to a model later needs no change here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, models


def allocate_ids(model: type[models.Model], count: int) -> list[int]:
    """`count` new primary keys from the model's own sequence (never reused, so rows inserted
    later by anyone else cannot collide with them)."""
    if count == 0:
        return []
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [f'"{table}"', count],
        )
        return [row[0] for row in cursor.fetchall()]


@dataclass
class Rows:
    """Rows for one table: a list of values per field name, all of one length."""

    model: type[models.Model]
    columns: dict[str, Sequence[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0


def insert_cte(name: str, rows: Rows) -> tuple[str, list[Any]]:
    """`name AS (INSERT INTO table (...) SELECT ... FROM json_populate_recordset(...) RETURNING 1)`
    and its parameters: the rows travel as one JSON document that the server reads into the
    table's own row type (each value through its column's input function), which costs the
    client one C-encoded string instead of an escaped array per column."""
    opts = rows.model._meta
    columns, selected, constants = [], [], []
    given: dict[str, Sequence[Any]] = {}
    for model_field in opts.concrete_fields:
        column = str(model_field.column)
        values = rows.columns.get(model_field.attname, rows.columns.get(model_field.name))
        if values is not None:
            given[column] = values
            selected.append(f'u."{column}"')
        elif model_field.primary_key:
            continue  # the identity default
        elif not model_field.has_default() and model_field.has_db_default():
            continue  # the column's database default
        else:
            selected.append("%s::jsonb" if _is_json(model_field) else "%s")
            constants.append(_prepared(model_field, model_field.get_default()))
        columns.append(f'"{column}"')
    names = list(given)
    document = json.dumps(
        [dict(zip(names, row, strict=True)) for row in zip(*given.values(), strict=True)], default=str
    )
    sql = (
        f'{name} AS (INSERT INTO "{opts.db_table}" ({", ".join(columns)}) '  # noqa: S608 - model metadata
        f'SELECT {", ".join(selected)} FROM json_populate_recordset(NULL::"{opts.db_table}", %s) AS u '
        "RETURNING 1)"
    )
    return sql, [*constants, document]


def insert_all(*ctes: tuple[str, list[Any]]) -> None:
    """The CTEs in one statement (one round trip; deferred foreign keys are checked at commit)."""
    sql = "WITH " + ", ".join(text for text, _ in ctes) + " SELECT 1"
    params = [param for _, cte_params in ctes for param in cte_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _is_json(model_field: models.Field[Any, Any]) -> bool:
    return isinstance(model_field, models.JSONField)


def _prepared(model_field: models.Field[Any, Any], value: Any) -> Any:
    """The value as psycopg takes it. Callers give plain values (numbers, text, datetimes,
    Decimals, UUIDs, None); only JSON needs converting (and the field's own prep would cost more
    than the insert for a batch of thousands). None is SQL NULL, as the ORM stores it, never the
    JSON value `null`: `open_call IS NULL` is how a run says no call is on the wire."""
    return json.dumps(value) if _is_json(model_field) and value is not None else value
