"""Is the database there? Asked once by manage.py before a command runs.

Without it, a command with no server to talk to waited DATABASE_POOL_TIMEOUT_SECONDS on the
connection pool (which retries a refused connection in the background, logging each attempt) and
ended in a traceback. Asked directly, a server that is down answers at once: the command says so in
one line, with what to do, and exits non-zero.

Commands that need no database run without one (NO_DATABASE_COMMANDS): help and version (and any
command's --help), `check` (unless given --database), migrations written from the models
(makemigrations, squashmigrations, optimizemigration), static files and translations, settings and
project scaffolding, and sendtestemail. When no database answers, their incidental attempts (the
row-lock system check, makemigrations' history check, both of which Django lets fail) fail at once
instead of waiting on the pool. Every other command, ours and any unknown one, needs it.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Sequence

import psycopg
from django.conf import settings
from django.db import connections

from config import embedded

NO_DATABASE_COMMANDS = frozenset(
    {
        "help",
        "version",
        "check",
        "makemigrations",
        "squashmigrations",
        "optimizemigration",
        "collectstatic",
        "findstatic",
        "makemessages",
        "compilemessages",
        "diffsettings",
        "startapp",
        "startproject",
        "sendtestemail",
    }
)
HELP_OPTIONS = frozenset({"-h", "--help", "--version"})


def _usage_only(argv: Sequence[str]) -> bool:
    """Django's own help or version, or a command's usage: nothing runs, nothing connects."""
    command = argv[1] if len(argv) > 1 else "help"
    return (
        command.startswith("-") or command in ("help", "version") or bool(HELP_OPTIONS.intersection(argv[2:]))
    )


def needs_database(argv: Sequence[str]) -> bool:
    """Whether `manage.py` with `argv` (sys.argv) uses the database."""
    if _usage_only(argv):
        return False
    command, options = argv[1], argv[2:]
    if command == "check":
        return any(option == "--database" or option.startswith("--database=") for option in options)
    return command not in NO_DATABASE_COMMANDS


def unreachable(alias: str = "default") -> str | None:
    """Why the database cannot be reached, in libpq's words (its first line), or None when it
    answers. One connection made directly with the parameters the pool would use (a pool waits
    out its timeout even for a server that refused at once), waiting at most
    DATABASE_POOL_TIMEOUT_SECONDS for a server that does not answer."""
    params = connections[alias].get_connection_params()
    params.setdefault("connect_timeout", max(2, math.ceil(settings.DATABASE_POOL_TIMEOUT_SECONDS)))
    try:
        psycopg.connect(**params).close()
    except psycopg.Error as exc:
        return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return None


def refusal(argv: Sequence[str]) -> str | None:
    """The one line a command that needs the database says when none answers, or None: it may
    run (a command that needs none, with a database that is down, after fail_at_once())."""
    if _usage_only(argv):
        return None
    reason = unreachable()
    if reason is None:
        return None
    if not needs_database(argv):
        fail_at_once()
        return None
    if os.environ.get("DATABASE_URL", "").strip():
        db = settings.DATABASES["default"]
        where = f"{db['HOST'] or 'localhost'}{':' + db['PORT'] if db['PORT'] else ''}, database {db['NAME']}"
        return (
            f"Cannot connect to the database of DATABASE_URL ({where}): {reason}. Start that server, "
            "or correct DATABASE_URL."
        )
    if embedded.is_running():
        return f"The demo's PostgreSQL (var/postgres) runs but refused the connection: {reason}."
    return (
        "No database is running: start `./dev run` in another terminal (this command then uses its "
        f"database), or run `./dev manage {shlex.join(argv[1:])}` (it starts one for the command), "
        "or set DATABASE_URL to a PostgreSQL server."
    )


def fail_at_once() -> None:
    """No database answers and the command needs none: a connection it tries anyway fails at once
    instead of waiting on the pool for a server known to be down."""
    for database in settings.DATABASES.values():
        pool = database.get("OPTIONS", {}).get("pool")
        if isinstance(pool, dict):
            pool["timeout"] = 0
