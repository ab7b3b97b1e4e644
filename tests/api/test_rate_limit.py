"""The per-token rate limit: 429 with Retry-After, counted per token, safe across threads."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
import time_machine

from schedules.api.auth import check_rate
from schedules.api.errors import ApiError
from schedules.models import ApiToken
from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db


def test_the_request_past_the_limit_is_429_with_retry_after(owner, other_owner, api_as, settings):
    settings.API_RATE_LIMIT_PER_MINUTE = 3
    api = api_as(owner, "read")
    other = api_as(other_owner, "read")

    with time_machine.travel(datetime(2026, 9, 3, 9, 0, 15, tzinfo=UTC), tick=False):
        assert [api.get("/budget").status_code for _ in range(3)] == [200, 200, 200]
        refused = api.get("/budget")
        assert other.get("/budget").status_code == 200  # counted per token

    assert refused.status_code == 429
    assert error_of(refused)["code"] == "rate_limited"
    assert refused["Retry-After"] == "45"

    with time_machine.travel(datetime(2026, 9, 3, 9, 1, 0, tzinfo=UTC), tick=False):
        assert api.get("/budget").status_code == 200  # a new minute


def test_refused_requests_do_not_reach_the_handler(owner, agent, api_as, settings):
    from tests.factories import make_schedule

    settings.API_RATE_LIMIT_PER_MINUTE = 1
    schedule = make_schedule(owner, agent)
    api = api_as(owner, "write")
    with time_machine.travel(datetime(2026, 9, 3, 9, 0, 0, tzinfo=UTC), tick=False):
        api.get("/budget")  # 403 (no read scope), but counted
        response = api.post(f"/schedules/{schedule.pk}/pause")

    assert response.status_code == 429
    schedule.refresh_from_db()
    assert schedule.status == "active"


def test_concurrent_requests_never_exceed_the_limit(settings):
    settings.API_RATE_LIMIT_PER_MINUTE = 25
    token = ApiToken(pk=987654)
    allowed: list[int] = []
    refused: list[int] = []
    start = threading.Barrier(8)

    def hammer() -> None:
        start.wait()
        for _ in range(10):
            try:
                check_rate(token)
                allowed.append(1)
            except ApiError as exc:
                refused.append(exc.status)

    with time_machine.travel(datetime(2026, 9, 3, 9, 0, 1, tzinfo=UTC), tick=False):
        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert len(allowed) == 25
    assert refused == [429] * 55
