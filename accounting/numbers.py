"""Whole numbers as people and clients write them: the one reader (parse once).

Python's `int()` reads far more than a person means: Arabic-Indic and fullwidth digits as
numbers (U+0665 as 5, U+FF13 as 3), `"5_0"` as 50, and `str.isdigit()` says yes to superscript
and circled digits (U+00B2, U+2460), which `int()` then refuses with an exception. The API
refuses all of those (its bodies carry JSON integers), and every other surface (dashboard and
admin forms, query parameters) reads text through `whole_number` instead, so one string means
one thing everywhere: ASCII digits 0-9, nothing else, and few enough of them.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

MAX_DIGITS = 18  # fits a PostgreSQL bigint; a longer number names no row and no limit
_WHOLE = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def whole_number(text: Any) -> int | None:
    """`text` as a non-negative whole number if it is one written in ASCII digits (surrounding
    spaces forgiven), else None. Never raises."""
    if not isinstance(text, str):
        return None
    stripped = text.strip(" ")
    return int(stripped) if _WHOLE.fullmatch(stripped) else None  # fullmatch: `$` allows a "\n"


def signed_whole_number(text: Any) -> int | None:
    """Like `whole_number`, with an optional leading minus (so "-1" can be refused in words)."""
    if isinstance(text, str) and text.strip(" ").startswith("-"):
        number = whole_number(text.strip(" ")[1:])
        return -number if number is not None else None
    return whole_number(text)


class WholeNumberField(forms.IntegerField):
    """Django's IntegerField, reading text with `whole_number`: other digit systems, superscripts,
    `5_0` or a 5,000-digit number are field errors, not 5, 3, a 500 or a bigint overflow."""

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        number = whole_number(str(value))
        if number is None:
            raise ValidationError(
                f"Enter a whole number written with the digits 0-9 (at most {MAX_DIGITS}).", code="invalid"
            )
        return number
