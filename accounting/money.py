"""Money as data: the one parser of amounts people and clients write, and the one JSON form.

USD is a `Decimal` everywhere (SPEC §2): in code, in JSON as a string, in the database as
fixed-point with 6 places. Every surface (API bodies, dashboard and admin forms, RunLimits,
settings read from the environment) parses through `parse_money`, so a string that passes here
is read the same way everywhere it is used.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

MONEY_PLACES = 6  # what the database stores
MAX_AMOUNT = Decimal("100000")  # USD; no limit, ceiling or price is this large


def format_money(value: Decimal) -> str:
    """Decimal USD as a JSON string: at least cents ("5.00"), at most 6 places, never exponent form."""
    exponent = value.normalize().as_tuple().exponent  # Decimal("3.000000") from the database is "3.00"
    places = min(max(2, -exponent if isinstance(exponent, int) else 2), MONEY_PLACES)
    return f"{value.quantize(Decimal(1).scaleb(-places)):f}"


def parse_money(value: Any, field: str) -> Decimal:
    """Money arrives as a decimal string or an integer; a float would already have lost cents."""
    if isinstance(value, (bool, float)):
        raise ValueError(f'{field} must be a decimal string such as "5.00", not a floating-point number')
    if isinstance(value, int):
        value = Decimal(value)
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except ArithmeticError:
            raise ValueError(f'{field} must be a decimal amount such as "5.00"') from None
    if not isinstance(value, Decimal):
        raise ValueError(f'{field} must be a decimal string such as "5.00"')
    if not value.is_finite():
        raise ValueError(f"{field} must be a finite amount")
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > MONEY_PLACES:
        raise ValueError(f"{field} must have at most {MONEY_PLACES} decimal places")
    if abs(value) >= MAX_AMOUNT:
        raise ValueError(f"{field} must be below {MAX_AMOUNT}")
    return value
