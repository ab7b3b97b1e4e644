"""Strict parsers for settings read from the environment.

A bad value stops start-up with one line naming the variable, instead of a default silently taking
its place. `ImproperlyConfigured` is what Django prints without a traceback-worthy surprise.
"""

from __future__ import annotations

import os
import zoneinfo
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
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


def env_decimal(name: str, default: str, *, positive: bool = True) -> Decimal:
    value = _raw(name) or default
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name} must be a decimal amount such as 5.00, not {value!r}.") from None
    if not number.is_finite() or (positive and number <= 0):
        raise ImproperlyConfigured(f"{name} must be a finite amount above zero, not {value!r}.")
    return number


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
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(
            f"{name} must be an IANA time zone such as Europe/Riga, not {value!r}."
        ) from None
    return value


def database_from_url(url: str, *, base_dir: str) -> dict[str, Any]:
    """`postgres://user:pass@host:port/name` or `sqlite:///path` into a Django DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(
                "DATABASE_URL must name a database, e.g. postgres://user@host:5432/name."
            )
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        if "pool" in options:
            # A pool opened before django-q2 forks its workers would be shared by them.
            raise ImproperlyConfigured("DATABASE_URL must not enable connection pooling (pool=...).")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
        }
    if parts.scheme == "sqlite":
        path = unquote(parts.path)
        if url.startswith("sqlite:////"):
            path = "/" + path.lstrip("/")
        else:
            path = os.path.join(base_dir, path.lstrip("/"))
        return sqlite_database(path)
    raise ImproperlyConfigured(
        f"DATABASE_URL must start with postgres:// or sqlite://, not {parts.scheme!r}://."
    )


def sqlite_database(path: str) -> dict[str, Any]:
    """An SQLite file the web server and the django-q2 cluster can share.

    WAL lets readers run beside the one writer; IMMEDIATE takes the write lock when a transaction
    starts, so two writers queue on the busy timeout instead of failing halfway with
    "database is locked" after one of them already read.
    """
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        },
    }
