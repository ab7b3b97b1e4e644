from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def example_com_allowed(settings: Any) -> None:
    """http.fetch may reach example.com (the tests' pages come from a MockTransport)."""
    settings.HTTP_FETCH_ALLOWED_HOSTS = ["example.com"]


@pytest.fixture(params=["one statement", "orm"])
def step_write(request: pytest.FixtureRequest, settings: Any) -> str:
    """Both ways a step is written: one statement (PostgreSQL's path) and the ORM (SQLite's)."""
    settings.RUN_STEP_ONE_STATEMENT = request.param == "one statement"
    return str(request.param)
