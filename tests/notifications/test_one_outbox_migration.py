"""The move to one notices outbox keeps what was waiting in the three before it: an unsent
self-pause, and a completion notice with its attempts."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from schedules import services
from schedules.models import Notice, NotificationAttempt, Occurrence
from tests.factories import make_agent, make_schedule, make_user, materialize


@pytest.mark.django_db(transaction=True)
def test_what_waited_in_the_old_outboxes_is_in_the_new_one():
    before = [("schedules", "0008_title_order_index")]
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("schedules")
    owner = make_user("outbox-owner")
    try:
        schedule = make_schedule(owner, make_agent("outbox-agent", model="sim-research"))
        occurrence = materialize(schedule)
        services.pause_for_invalid_definition(schedule, detail="its agent is retired")
        pause_id = schedule.pause_events.get(action="pause").pk

        executor = MigrationExecutor(connection)
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        row = old.get_model("schedules", "CompletionNotice").objects.create(
            owner_id=owner.pk,
            schedule_id=schedule.pk,
            occurrence_id=occurrence.pk,
            run_id=occurrence.run_id,
            created_at=timezone.now(),
        )
        old.get_model("schedules", "NotificationAttempt").objects.create(
            owner_id=owner.pk,
            schedule_id=schedule.pk,
            completion_notice_id=row.pk,
            channel="email",
            outcome="delivered",
            created_at=timezone.now(),
        )

        MigrationExecutor(connection).migrate(latest)
        paused = Notice.objects.get(kind="paused")
        assert (paused.pause_event_id, paused.notified_at) == (pause_id, None)  # still to be sent
        completed = Notice.objects.get(kind="completed")
        assert (completed.occurrence_id, completed.run_id) == (occurrence.pk, occurrence.run_id)
        assert NotificationAttempt.objects.get().notice_id == completed.pk  # its attempt follows it
    finally:
        MigrationExecutor(connection).migrate(latest)
        Occurrence.objects.filter(schedule__owner=owner).delete()
        User.objects.filter(pk=owner.pk).delete()
