"""The test database as a URL, for child processes (qcluster, tick, gunicorn): the same server
the tests run on, wherever it listens (the embedded server's unix socket, or DATABASE_URL's host)."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def database_url(*, user: str | None = None) -> str:
    db = connection.settings_dict
    user = user or db["USER"] or "postgres"
    host = db["HOST"] or ""
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    if host.startswith("/"):  # a unix socket directory
        port = f"&port={db['PORT']}" if db["PORT"] else ""
        return f"postgres://{quote(user)}{password}@/{db['NAME']}?host={quote(host, safe='/')}{port}"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{quote(user)}{password}@{host or 'localhost'}{port}/{db['NAME']}"
