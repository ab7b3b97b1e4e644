"""Links in notifications use SITE_URL; in development it defaults to the address `./dev run`
serves, its PORT, so the demo's notices point at the server actually running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def site_url(**env: str) -> str:
    probe = "import django; django.setup(); from django.conf import settings; print(settings.SITE_URL)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "APP_ENV": "development",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "http://127.0.0.1:8000"),
        ({"PORT": "8123"}, "http://127.0.0.1:8123"),
        ({"PORT": "8123", "SITE_URL": "https://schedules.example.com/"}, "https://schedules.example.com"),
    ],
)
def test_site_url_defaults_to_the_served_port_in_development(env, expected):
    assert site_url(**env) == expected


def test_the_run_command_passes_its_port_to_the_server_and_the_cluster():
    script = (ROOT / "dev").read_text()
    run = script.split("  run)", 1)[1].split(";;", 1)[0]
    assert "export PORT=${PORT:-8000}" in run
    assert "export SITE_URL=${SITE_URL:-http://127.0.0.1:$PORT}" in run
    assert run.index("export SITE_URL") < run.index("qcluster") < run.index('runserver "127.0.0.1:$PORT"')
