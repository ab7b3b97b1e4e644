"""A bounded fuzz pass: schemathesis generates valid and invalid requests for every operation of
the served schema. No input may produce a 500, and every response must match the schema."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import ALL_SCOPES, token_for
from tests.factories import fail, make_schedule, materialize

pytestmark = pytest.mark.django_db

# Not negative_data_rejection: unknown query parameters are ignored, as HTTP APIs commonly do.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


class InTestTransaction:
    """Django's WSGI handler for in-process calls inside the test's transaction: like Django's
    test client, it keeps the request signals from closing the test's database connection."""

    def __init__(self) -> None:
        self.handler = WSGIHandler()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request_started.disconnect(close_old_connections)
        request_finished.disconnect(close_old_connections)
        try:
            response = self.handler(environ, start_response)
            try:
                return [b"".join(response)]
            finally:
                response.close()
        finally:
            request_started.connect(close_old_connections)
            request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_target(admin_user, owner, agent, settings) -> dict[str, str]:
    """An admin's all-scope token, and a little data for generated ids to find."""
    settings.API_RATE_LIMIT_PER_MINUTE = 100_000
    for title in ("Morning briefing", "Evening digest"):
        schedule = make_schedule(owner, agent, title=title)
        fail(materialize(schedule))
    return {"Authorization": f"Bearer {token_for(admin_user, *ALL_SCOPES)}"}


# Loaded from the running application when this module is collected (no database needed).
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", InTestTransaction())


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_generated_request_makes_the_api_fail(case: Any, fuzz_target: dict[str, str]) -> None:
    response = case.call(headers=fuzz_target)
    case.validate_response(response, checks=CHECKS, headers=fuzz_target)
