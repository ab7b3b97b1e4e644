"""Titles derived from people's text fit their columns by construction.

A column's limit counts code points; what a person sees counts grapheme clusters. "e" followed by
250 combining acute accents is one visible character and 251 code points, and a Thai, Devanagari,
vowelled Arabic or pointed Hebrew title of 200 letters is well over 200 code points. So a derived
title is shortened for display first (Django's Truncator counts visible characters), then cut to
the column by code points, never inside a cluster: the marks, joiners and variation selectors that
belong to a kept letter are kept with it or dropped with it.
"""

from __future__ import annotations

import unicodedata

from django.utils.text import Truncator

ELLIPSIS = "…"
_JOINERS = {"\u200d", "\u034f"}  # zero-width joiner, combining grapheme joiner


def _continues_cluster(char: str) -> bool:
    """Whether `char` attaches to the character before it (so a cut must not fall before it)."""
    if char in _JOINERS or unicodedata.category(char) in ("Mn", "Mc", "Me"):
        return True
    code = ord(char)
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0x1F3FB <= code <= 0x1F3FF


def fit(text: str, limit: int) -> str:
    """`text` in at most `limit` code points: whole, or cut at a cluster boundary with "…"."""
    if len(text) <= limit:
        return text
    end = max(1, limit - len(ELLIPSIS))
    cut = end
    while cut > 0 and (_continues_cluster(text[cut]) or text[cut - 1] in _JOINERS):
        cut -= 1
    if cut == 0:  # one cluster longer than the column ("e" and 250 accents): keep what fits of it
        cut = end
    return text[:cut].rstrip() + ELLIPSIS


def shortened(text: str, *, shown: int, limit: int) -> str:
    """At most `shown` visible characters for display, and at most `limit` code points stored."""
    return fit(Truncator(text).chars(shown), limit)
