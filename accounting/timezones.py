"""Time zone names, parsed once where they enter (forms, API bodies, the admin, the environment)
by the same code every later use relies on.

Only IANA names are accepted: `zoneinfo` also opens files such as `localtime`, `posixrules`,
`Factory` or `right/UTC` that are not zones a person means (or that differ between machines),
and a name that saves must work on every machine that later reads it.
"""

from __future__ import annotations

import zoneinfo
from functools import cache
from typing import TypeGuard

from django.conf import settings

# In the tz database's files but not places: a machine-local link, a rules template, a placeholder.
NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


@cache
def time_zone_names() -> frozenset[str]:
    return frozenset(n for n in zoneinfo.available_timezones() if n not in NOT_PLACES)


def is_time_zone(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and name in time_zone_names()


def parse_time_zone(name: str, field: str = "timezone") -> zoneinfo.ZoneInfo:
    """The zone for an IANA name such as Europe/Riga, or ValueError naming `field`."""
    if not is_time_zone(name):
        raise ValueError(f"{field} must be an IANA time zone such as Europe/Riga, not {str(name)[:64]!r}")
    return zoneinfo.ZoneInfo(name)


def default_time_zone() -> str:
    """DEFAULT_OWNER_TIME_ZONE: an owner's zone before they choose one (checked at start-up)."""
    return str(settings.DEFAULT_OWNER_TIME_ZONE)


def owner_zone(name: str) -> zoneinfo.ZoneInfo:
    """A stored time zone name as a zone; the default zone when it is not one (old data) instead
    of failing every page and admission for that owner. Which zone an owner has:
    accounting.selectors.owner_timezone."""
    try:
        return parse_time_zone(name)
    except ValueError:
        return zoneinfo.ZoneInfo(default_time_zone())
