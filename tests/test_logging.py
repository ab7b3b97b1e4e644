"""What the log says about requests refused as the client's error: one line each, as Django words
it, without Django's traceback (config.logfilters); a server error keeps its traceback."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from config.logfilters import ClientErrorsOnOneLine


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """The configured console handler's output, with Django's request and security loggers at the
    levels production has (the suite quietens them)."""
    (handler,) = [
        h
        for h in logging.getLogger().handlers
        if any(isinstance(f, ClientErrorsOnOneLine) for f in h.filters)
    ]
    assert isinstance(handler, logging.StreamHandler)
    out = io.StringIO()
    previous = handler.setStream(out)
    levels = {name: logging.getLogger(name).level for name in ("django.request", "django.security")}
    logging.getLogger("django.request").setLevel(logging.WARNING)
    logging.getLogger("django.security").setLevel(logging.ERROR)
    try:
        yield out
    finally:
        handler.setStream(previous)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


@pytest.mark.django_db
def test_a_refused_admin_lookup_field_is_one_line_in_the_log(admin_client, console):
    response = admin_client.get("/admin/runs/run/?_to_field=password")

    assert response.status_code == 400
    lines = console.getvalue().splitlines()
    assert any("ERROR django.security.DisallowedModelAdminToField" in line for line in lines), lines
    assert "Traceback" not in console.getvalue()


@pytest.mark.django_db
def test_a_forbidden_page_is_one_line_in_the_log(client, console, django_user_model):
    staff = django_user_model.objects.create_user("staff-without-permissions", is_staff=True)
    client.force_login(staff)

    response = client.get("/admin/runs/run/")

    assert response.status_code == 403
    lines = console.getvalue().splitlines()
    assert any(
        "WARNING django.request Forbidden (Permission denied): /admin/runs/run/" in line for line in lines
    )
    assert "Traceback" not in console.getvalue()


def test_a_server_error_keeps_its_traceback(console):
    try:
        raise RuntimeError("the product's own bug")
    except RuntimeError:
        logging.getLogger("django.request").error(
            "Internal Server Error: /", exc_info=True, extra={"status_code": 500}
        )

    assert "Traceback" in console.getvalue()
    assert "RuntimeError: the product's own bug" in console.getvalue()
