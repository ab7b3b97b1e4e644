"""Scenario: the owner asks an agent that writes slowly (the simulator's sim-slow, streaming its
answer word by word over six seconds) and watches the answer grow on the conversation page while the
run is in flight, without a reload; a real `manage.py qcluster` runs it. The text is on the page
within a second of reaching the worker (docs/decisions/0006-streaming.md): the worker's watch writes
a run's first text at once, and the page polls the answer being written twice a second."""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connection

from runs.models import Run
from tests.browser.conftest import LAPTOP, PHONE, serious_violations, shoot, sign_in
from tests.factories import PASSWORD, make_agent, make_user
from tests.scheduler.conftest import process_env, read_log, spawn  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, reset_sequences=True),
]


def _first_text_at(found: dict[str, float], stop: threading.Event) -> None:
    """When the worker's first streamed text reached the database (within a tick of reaching the
    worker), read every 20 ms."""
    try:
        while not stop.is_set():
            if Run.objects.exclude(partial_text="").exists():
                found["at"] = time.monotonic()
                return
            time.sleep(0.02)
    finally:
        connection.close()


def test_the_answer_grows_on_the_page_while_the_run_is_in_flight(browser, live_server, spawn):  # noqa: F811
    make_user("olga", tz="Europe/Riga")
    make_agent("slow-writer", model="sim-slow", tools=[])
    cluster = spawn("qcluster")
    base = live_server.url
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    page = context.new_page()
    sign_in(page, base, "olga", password=PASSWORD)

    page.goto(f"{base}/conversations/new/")
    page.get_by_label("Agent").select_option("slow-writer")
    page.get_by_label("Message").fill("Brief me on today's news, slowly: delay=6")
    page.get_by_role("button", name="Send").click()
    page.wait_for_url(re.compile(r"/conversations/\d+/$"))
    page.evaluate("window.__still_this_page = true")
    found: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_first_text_at, args=(found, stop))
    watcher.start()
    writing = page.locator(".writing__text")
    try:
        writing.wait_for(timeout=60_000)
    except Exception:
        raise AssertionError(read_log(cluster)) from None
    shown_at = time.monotonic()
    stop.set()
    watcher.join()

    first = writing.inner_text()
    assert first.startswith("Briefing")
    assert Run.objects.get().status == "running"  # visible before the run completed
    assert "at" in found and shown_at - found["at"] < 1.0  # on the page within a second
    assert "Writing…" in page.locator("#tail .bubble--assistant").inner_text()
    shoot(page, "conversation-answer-being-written", readme=True)
    assert serious_violations(page) == []

    page.wait_for_function(
        "shown => (document.querySelector('.writing__text') || {}).innerText?.length > shown",
        arg=len(first),
        timeout=10_000,
    )  # it grows
    grown = writing.inner_text()
    assert grown.startswith(first) and Run.objects.get().status == "running"

    answer = page.locator("#tail .answer")
    answer.wait_for(timeout=30_000)
    assert page.evaluate("window.__still_this_page") is True  # no reload: htmx swapped it in
    run = Run.objects.get()
    assert run.status == "completed" and answer.inner_text().startswith(grown)
    assert page.locator(".writing__text").count() == 0
    page.set_viewport_size(PHONE)
    shoot(page, "conversation-answer-written-phone")
    context.close()
