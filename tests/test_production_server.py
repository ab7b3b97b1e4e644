"""The README's deployment steps, as written, from this checkout: production settings on
PostgreSQL, `collectstatic`, `check --deploy`, then gunicorn serving a page and a static file."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.database import database_url

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def production_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "APP_ENV": "production",
        "SECRET_KEY": "production-test-key-" + "x7Q9" * 10,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SITE_URL": "https://schedules.example.com",
        "TRUSTED_PROXY_COUNT": "1",  # the deployment guide's one TLS-terminating proxy
        "DATABASE_URL": database_url(),
        "STATIC_ROOT": str(tmp_path / "static"),
    }


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_gunicorn_serves_the_production_settings_on_postgresql(production_env):
    collected = manage(production_env, "collectstatic", "--no-input", "-v0")
    assert collected.returncode == 0, collected.stderr
    checked = manage(production_env, "check", "--deploy", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    port = _free_port()
    gunicorn = Path(sys.executable).with_name("gunicorn")
    server = subprocess.Popen(
        [str(gunicorn), "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"],
        cwd=ROOT,
        env=production_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        secure = {"X-Forwarded-Proto": "https"}  # what the TLS-terminating proxy sends
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(f"{base}/login/", headers=secure, timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, (
                    server.stdout and server.stdout.read()
                )
                time.sleep(0.3)
        assert page.status_code == 200 and "Sign in" in page.text
        assert "prints the" not in page.text  # the demo's password hint is for development only
        assert page.headers["Strict-Transport-Security"].startswith("max-age=")
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        assert httpx.get(f"{base}/login/", timeout=5).status_code == 301  # plain http goes to https
        stylesheet = next(
            part.split('"')[1] for part in page.text.split("href=") if ".css" in part.split('"')[1]
        )
        asset = httpx.get(base + stylesheet, headers=secure, timeout=5)
        assert asset.status_code == 200 and "text/css" in asset.headers["Content-Type"]
        assert httpx.get(f"{base}/simulator/webhook/", headers=secure, timeout=5).status_code == 404  # off
    finally:
        server.terminate()
        server.wait(timeout=20)
    # Each worker says which address sign-in throttling keys on.
    assert "1 hop from the right of X-Forwarded-For" in (server.stdout.read() if server.stdout else "")
