"""What the log says about requests refused as the client's error: one line each, as Django words
it, without Django's traceback (config.logfilters); a server error keeps its traceback, and the
record itself keeps it for any other handler."""

from __future__ import annotations

import io
import logging
import logging.handlers
from collections.abc import Iterator

import pytest

from config.logfilters import ClientErrorsOnOneLine


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """The configured console handler's output, with Django's request and security loggers at the
    levels production has (the suite quietens them)."""
    (handler,) = [h for h in logging.getLogger().handlers if isinstance(h.formatter, ClientErrorsOnOneLine)]
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


def test_another_handler_still_gets_the_traceback_of_a_client_error(console):
    """A handler after the console (a deployer's error tracker, say) sees the record whole."""
    other = logging.handlers.BufferingHandler(10)
    logging.getLogger().addHandler(other)
    try:
        try:
            raise PermissionError("refused")
        except PermissionError:
            logging.getLogger("django.request").warning(
                "Forbidden: /x/", exc_info=True, extra={"status_code": 403}
            )
    finally:
        logging.getLogger().removeHandler(other)

    assert "Forbidden: /x/" in console.getvalue() and "Traceback" not in console.getvalue()
    (record,) = other.buffer
    assert record.exc_info is not None and "Traceback" in logging.Formatter().format(record)
