"""Keyset pagination: newest first, a unique tiebreak, and an opaque cursor naming the last item.

A cursor stays valid while rows are added or deleted: the next page starts strictly after the
last item seen, so nothing is shown twice and nothing already listed shifts a page.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import operator
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest

from schedules.api.errors import ApiError

M = TypeVar("M", bound=Model)
P = TypeVar("P")
Kind = Literal["int", "datetime"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
MAX_CURSOR_CHARS = 200
_BIGINT = 2**63


class Ordering:
    """Descending order over `fields`, the last of which is unique."""

    def __init__(self, *fields: tuple[str, Kind]) -> None:
        self.fields = fields

    def order_by(self) -> list[str]:
        return [f"-{name}" for name, _ in self.fields]

    def key(self, obj: Model) -> list[Any]:
        return [getattr(obj, name) for name, _ in self.fields]

    def after(self, values: Sequence[Any]) -> Q:
        """Rows strictly after `values` in this order."""
        branches: list[Q] = []
        equal: dict[str, Any] = {}
        for (name, _), value in zip(self.fields, values, strict=True):
            branches.append(Q(**equal, **{f"{name}__lt": value}))
            equal[name] = value
        return functools.reduce(operator.or_, branches)

    def encode(self, obj: Model) -> str:
        values = [v.isoformat() if isinstance(v, datetime) else v for v in self.key(obj)]
        return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")

    def decode(self, cursor: str) -> list[Any]:
        invalid = ApiError(
            422,
            "invalid_parameter",
            "cursor is not one this API gave out; use the `next` link of the previous page",
            fields={"cursor": "cursor must be the value from a `next` link"},
        )
        if len(cursor) > MAX_CURSOR_CHARS:
            raise invalid
        try:
            raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
            values = json.loads(raw)
        except (binascii.Error, ValueError, RecursionError):
            raise invalid from None
        if not isinstance(values, list) or len(values) != len(self.fields):
            raise invalid
        decoded: list[Any] = []
        for (_, kind), value in zip(self.fields, values, strict=True):
            if kind == "int":
                if type(value) is not int or not 0 <= value < _BIGINT:
                    raise invalid
                decoded.append(value)
            else:
                try:
                    moment = datetime.fromisoformat(value) if isinstance(value, str) else None
                    if moment is None or moment.tzinfo is None:
                        raise invalid
                    decoded.append(moment.astimezone(UTC))
                except (ValueError, OverflowError):  # not a time, or beyond year 9999 in UTC
                    raise invalid from None
        return decoded


def paginate(
    request: HttpRequest,
    queryset: QuerySet[M],
    ordering: Ordering,
    render: Callable[[M], Any],
    page: Callable[..., P],
    *,
    cursor: str | None,
    limit: int,
) -> P:
    """One page: its rendered items and the absolute URL of the next page (None on the last), as
    `page(items=..., next=...)`."""
    rows = queryset.order_by(*ordering.order_by())
    if cursor:
        rows = rows.filter(ordering.after(ordering.decode(cursor)))
    found = list(rows[: limit + 1])
    next_url = None
    if len(found) > limit:
        found = found[:limit]
        query = request.GET.copy()
        query["cursor"] = ordering.encode(found[-1])
        next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    return page(items=[render(obj) for obj in found], next=next_url)
