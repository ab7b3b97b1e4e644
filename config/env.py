"""Strict parsers for settings read from the environment.

A bad value stops start-up with one line naming the variable, instead of a default silently taking
its place. `ImproperlyConfigured` is what Django prints without a traceback-worthy surprise.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from accounting.money import parse_money
from accounting.timezones import is_time_zone

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_PLAIN_NUMBER = re.compile(r"^[0-9]{1,6}(?:\.[0-9]{1,6})?$")

# Every variable the settings read. An agent may never name one of these as the environment
# variable holding its API key (runs.models.Agent): that would send, say, DATABASE_URL to
# whatever base URL the agent points at.
READ: set[str] = set()


def _raw(name: str) -> str | None:
    READ.add(name)
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | None = None, *, required: bool = False) -> str:
    value = _raw(name)
    if value is None:
        if required or default is None:
            raise ImproperlyConfigured(f"{name} must be set.")
        return default
    return value


def env_site_url(name: str, default: str | None, *, https: bool) -> str:
    """The site's own base URL, for links sent out of it: http(s)://host[:port][/prefix], no
    query or fragment, https when `https` (production); without a trailing slash."""
    value = _raw(name) or default
    if value is None:
        raise ImproperlyConfigured(f"{name} must be set (the address people open, for links in notices).")
    parts = urlsplit(value)
    schemes = ("https",) if https else ("http", "https")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in schemes or not parts.hostname or parts.query or parts.fragment:
        example = "https://schedules.example.com"
        raise ImproperlyConfigured(
            f"{name} must be an {' or '.join(schemes)} URL such as {example}, not {value!r}."
        )
    return value.rstrip("/")


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, not {value!r}.")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, not {number}.")
    return number


def env_money(name: str, default: str) -> Decimal:
    """A USD amount above zero, in the grammar every surface accepts (accounting.money)."""
    value = _raw(name) or default
    try:
        amount = parse_money(value, name)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{exc} (for example 25.00), not {value!r}.") from None
    if amount <= 0:
        raise ImproperlyConfigured(f"{name} must be an amount above zero, not {value!r}.")
    return amount


def _plain_number(name: str, value: str, example: str) -> Decimal:
    if not _PLAIN_NUMBER.match(value):
        raise ImproperlyConfigured(f"{name} must be a plain number such as {example}, not {value!r}.")
    return Decimal(value)


def env_seconds(name: str, default: str) -> float:
    """A duration in seconds above zero, such as 0.5."""
    value = _raw(name) or default
    seconds = _plain_number(name, value, "0.5")
    if seconds <= 0:
        raise ImproperlyConfigured(f"{name} must be above zero, not {value!r}.")
    return float(seconds)


def env_fraction(name: str, default: str) -> Decimal:
    """A share from 0 up to (not including) 1, such as 0.10."""
    value = _raw(name) or default
    fraction = _plain_number(name, value, "0.10")
    if fraction >= 1:
        raise ImproperlyConfigured(f"{name} must be below 1 (0.10 is ten per cent), not {value!r}.")
    return fraction


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _raw(name) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}.")
    return value


def env_timezone(name: str, default: str) -> str:
    value = _raw(name) or default
    if not is_time_zone(value):
        raise ImproperlyConfigured(f"{name} must be an IANA time zone such as Europe/Riga, not {value!r}.")
    return value


def database_from_url(url: str) -> dict[str, Any]:
    """`postgres://user:pass@host:port/name` into a Django DATABASES entry. A unix socket is named by
    a `host` query parameter (`postgres://postgres@/name?host=/path/to/dir`), as libpq reads it."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured(
            f"DATABASE_URL must start with postgres:// (PostgreSQL is the only engine), not {url[:40]!r}."
        )
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured("DATABASE_URL must name a database, e.g. postgres://user@host:5432/name.")
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    if "pool" in options:
        # The pool is configured by DATABASE_POOL_SIZE (config.settings), not per URL.
        raise ImproperlyConfigured("DATABASE_URL must not enable connection pooling (pool=...).")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured("DATABASE_URL has a port that is not a number.") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": options.pop("host", None) or parts.hostname or "",
        "PORT": options.pop("port", None) or str(port or ""),
        "OPTIONS": options,
    }
