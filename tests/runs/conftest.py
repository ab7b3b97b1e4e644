from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def example_com_allowed(settings: Any) -> None:
    """http.fetch may reach example.com (the tests' pages come from a MockTransport)."""
    settings.HTTP_FETCH_ALLOWED_HOSTS = ["example.com"]
