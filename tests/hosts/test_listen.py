"""Behind a transaction-pooling proxy (PgBouncer in transaction mode) a session cannot be kept, and
LISTEN needs one: DATABASE_LISTEN_URL takes the waker's LISTEN session straight to the server while
everything else goes through the proxy (docs/deploying.md)."""

from __future__ import annotations

import time

import pytest
from django.db.models import Q

from runs import conversations
from runs.models import Run
from runs.tasks import enqueue_runs
from tests.database import database_url
from tests.factories import make_agent
from tests.hosts.conftest import Hosts, make_host, wakers
from tests.scheduler.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_wakers_listen_session_goes_to_database_listen_url_past_the_proxy(owner, tmp_path):
    host = make_host("host-a", tmp_path, DATABASE_LISTEN_URL=database_url(), Q_POLL_SECONDS="30")
    try:
        host.start()
        Hosts([host]).wait_ready()
        # It hears a queued run at once, with the broker's poll 30 s away.
        sent = time.monotonic()
        conversations.start_conversation(
            owner.pk, make_agent(model="sim-research"), "Hi", enqueue=enqueue_runs
        )
        wait_for(Run.objects.filter(~Q(started_at=None)).exists, timeout=20, interval=0.05)
        assert time.monotonic() - sent < 3, host.log()

        host.proxy.cut()  # the proxy (the pooler) drops every session it carries
        time.sleep(1)
        assert wakers() == 1, host.log()  # but not the LISTEN session: it never went through it
    finally:
        host.end()
