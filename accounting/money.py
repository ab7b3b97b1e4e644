"""Money as data: the one parser of amounts people and clients write, and the one JSON form.

USD is a `Decimal` everywhere (docs/contract.md#run-limits): in code, in JSON as a string, in the
database as fixed-point with 6 places. Every surface (API bodies, dashboard and admin forms, RunLimits,
settings read from the environment) parses through `parse_money`, so a string that passes here is read
the same way everywhere it is used.

The grammar is deliberately narrower than Python's `Decimal()`, which reads "5_0" as 50, "5E+0"
as 5, and Arabic-Indic or fullwidth digits as numbers: ASCII digits, at most one ".", no sign, no
exponent, no underscore, no other digit systems, and an upper bound. USD amounts people type (budgets,
ceilings, limits) have at most 2 decimal places; prices per million tokens may have up to 6
(`places=PRICE_PLACES`), since a provider may charge USD 0.075 per million.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

MONEY_PLACES = 6  # what the database stores, and what code may compute
USD_PLACES = 2  # an amount a person or an API client writes
PRICE_PLACES = 6  # a price per million tokens
MAX_AMOUNT = Decimal("100000")  # USD; no limit, ceiling or price is this large
MAX_DIGITS = len(str(int(MAX_AMOUNT))) - 1  # 99999.99 is the largest amount

# Leading and trailing ASCII spaces are forgiven (a form field, a pasted value); nothing else.
_GRAMMAR = {places: re.compile(rf"^[0-9]{{1,{MAX_DIGITS}}}(?:\.[0-9]{{1,{places}}})?$") for places in (2, 6)}


def money_pattern(places: int = USD_PLACES) -> str:
    """The grammar as a regular expression, for the OpenAPI schema and HTML `pattern`."""
    return _GRAMMAR[places].pattern


def format_money(value: Decimal) -> str:
    """Decimal USD as a JSON string: at least cents ("5.00"), at most 6 places, never exponent form."""
    exponent = value.normalize().as_tuple().exponent  # Decimal("3.000000") from the database is "3.00"
    places = min(max(2, -exponent if isinstance(exponent, int) else 2), MONEY_PLACES)
    return f"{value.quantize(Decimal(1).scaleb(-places)):f}"


def parse_money(value: Any, field: str, *, places: int = USD_PLACES) -> Decimal:
    """An amount as written by a person, a client or an operator, or ValueError naming `field`.

    Accepts a string in the grammar above or a non-negative integer (JSON `5`); refuses floats
    (a float has already lost cents). A `Decimal` comes from our own code and may carry up to
    MONEY_PLACES. Signs are the caller's rule to state ("must be above 0"); here a minus sign is
    simply not part of the grammar.
    """
    amount: Decimal
    if isinstance(value, (bool, float)):
        raise ValueError(f'{field} must be a decimal string such as "5.00", not a floating-point number')
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{field} must not be negative")
        amount = Decimal(value)
    elif isinstance(value, str):
        text = value.strip(" ")
        if not _GRAMMAR[places].fullmatch(text):  # not `$`, which also matches before a final "\n"
            raise ValueError(f"{field} {_why_not(text, places)}")
        amount = Decimal(text)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{field} must be a finite amount")
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and -exponent > MONEY_PLACES:
            raise ValueError(f"{field} must have at most {MONEY_PLACES} decimal places")
        if value < 0:
            raise ValueError(f"{field} must not be negative")
        amount = value
    else:
        raise ValueError(f'{field} must be a decimal string such as "5.00"')
    if amount >= MAX_AMOUNT:
        raise ValueError(f"{field} must be below {MAX_AMOUNT:,} USD")
    return amount


def _why_not(text: str, places: int) -> str:
    """The first rule a refused string breaks, in plain words."""
    if not text:
        return 'must be an amount such as "5.00"'
    if text.startswith(("-", "+")):
        return "must be written without a sign"
    if not text.isascii():
        return "must be written with the digits 0-9"
    if re.fullmatch(r"[0-9][0-9_,.]*", text) and ("_" in text or "," in text):
        return "must be written without separators (_ or ,)"
    if re.fullmatch(r"[0-9.]+[eE][+-]?[0-9]+", text):
        return "must be written without an exponent"
    whole, dot, fraction = text.partition(".")
    if text.count(".") > 1 or not whole.isdigit() or (dot and not fraction.isdigit()):
        return 'must be an amount such as "5.00": digits with at most one "."'
    if len(fraction) > places:
        return f"must have at most {places} decimal places"
    return f"must be below {MAX_AMOUNT:,} USD"
