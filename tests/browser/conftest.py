"""Playwright driving Debian's Chromium against the live server.

Screenshots go to tests/artifacts/ on every run; with UPDATE_SCREENSHOTS=1 the README's copies in
docs/screenshots/ are refreshed too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

# The sync API drives its own event loop in a greenlet; the ORM calls made between page actions
# in these tests run in the test thread and are safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
SCREENSHOTS = ROOT / "docs" / "screenshots"
PASSWORD = "demo-password-for-tests"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def demo(db: None) -> dict[str, User]:
    """The README's demo data, with passwords we know."""
    call_command("demo_data", stdout=open(os.devnull, "w"))  # noqa: SIM115
    users = {}
    for name in ("owner", "admin"):
        user = User.objects.get(username=name)
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
        users[name] = user
    return users


def shoot(page: Any, name: str, *, readme: bool = False, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if readme and os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / f"{name}.png")
    return path


def sign_in(page: Any, base: str, username: str, *, admin: bool = False, password: str = PASSWORD) -> None:
    page.goto(f"{base}{'/admin/login/' if admin else '/login/'}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.locator("[type=submit]").click()
    page.wait_for_load_state()


def serious_violations(page: Any) -> list[str]:
    """axe-core (bundled with axe-playwright-python, injected from disk: no network) on the page."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
