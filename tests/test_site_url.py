"""Links in notifications use SITE_URL; in development it defaults to the address `./dev run`
serves, its PORT, so the demo's notices point at the server actually running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def site_url(**env: str) -> str:
    return settings_value("SITE_URL", APP_ENV="development", **env)


def settings_value(name: str, **env: str) -> str:
    """A setting as the settings module reads it from `env`, in a fresh process."""
    probe = f"import django; django.setup(); from django.conf import settings; print(settings.{name})"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "config.settings",
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
    serve = script.split("  serve)", 1)[1].split(";;", 1)[0]  # what `run` runs, on its database
    assert "export PORT=${PORT:-8000}" in run
    assert "export SITE_URL=${SITE_URL:-http://127.0.0.1:$PORT}" in run
    assert run.index("export SITE_URL") < run.index("./dev serve")
    assert serve.index("qcluster") < serve.index('runserver "127.0.0.1:$PORT"')


def settings_error(**env: str) -> str:
    probe = "import django; django.setup()"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    return result.stderr.strip().splitlines()[-1]


PRODUCTION = {
    "APP_ENV": "production",
    "SECRET_KEY": "production-test-key-" + "x7Q9" * 10,
    "ALLOWED_HOSTS": "schedules.example.com",
    "DATABASE_URL": "postgres://postgres@db.example.com/postgres",  # parsed, never connected to
}


def test_production_will_not_start_without_the_address_its_links_point_at():
    # Else every notice would link to http://127.0.0.1:8000 and nothing would say so.
    assert "SITE_URL must be set" in settings_error(**PRODUCTION)


@pytest.mark.parametrize(
    "value",
    ["http://schedules.example.com", "schedules.example.com", "https://", "https://h:abc/", "https://h/?q=1"],
)
def test_production_refuses_a_site_url_that_is_not_an_https_address(value):
    assert "SITE_URL must be an https URL" in settings_error(**PRODUCTION, SITE_URL=value)


def test_development_refuses_one_that_is_not_a_url_at_all():
    assert "SITE_URL must be an http or https URL" in settings_error(
        APP_ENV="development", SITE_URL="localhost"
    )
