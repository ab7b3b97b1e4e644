"""The story behind docs/decisions/0002, end to end: a briefing fails on two consecutive mornings for
different reasons — its budget runs out before synthesis, then the provider answers 529. The first
failure is tolerated, the second pauses it; resume keeps the count; a completed run resets it; and every
event is still diagnosable after the conversations are deleted."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounting.models import AccountingEvent
from runs.models import Conversation, Run
from runs.services import delete_conversation
from schedules import services
from schedules.models import PauseEvent
from schedules.schemas import parse_explicit
from tests.factories import make_agent, make_schedule, run_due

pytestmark = pytest.mark.django_db

MONDAY = datetime(2026, 9, 1, 5, 0, tzinfo=UTC)  # 08:00 in Riga


def test_two_mornings_two_reasons_then_resume_keeps_the_count_and_a_completion_resets_it(owner, admin_user):
    agent = make_agent("briefing-agent", model="sim-expensive")  # about USD 0.60 a call
    briefing = make_schedule(
        owner, agent, title="Technology briefing", cron="0 9 * * *", tz="Europe/Riga", now=MONDAY
    )
    old_budget = {
        **briefing.revision.limits,
        "max_cost": "1.00",
        "synthesis_reserve_cost": "0.00",
        "synthesis_reserve_steps": 0,
        "synthesis_reserve_model_calls": 0,
    }
    services.pin_revision(
        briefing,
        parse_explicit(
            {"limits": old_budget, "max_consecutive_failures": 2, "reason": "USD 1, as in September"}
        ),
        by=admin_user,
        via="test",
        now=MONDAY,
    )

    first = run_due(briefing)  # 1 Sep, 09:00 Riga
    assert (first.failure_reason, first.failure_dimension) == ("budget_exhausted", "cost")
    assert (briefing.status, briefing.consecutive_failures) == ("active", 1)  # tolerated

    agent.model = "sim-overloaded"  # the provider has a bad morning
    agent.save()
    second = run_due(briefing)  # 2 Sep
    assert (second.failure_reason, second.http_status, second.provider_code) == (
        "provider_error",
        529,
        "overloaded_error",
    )
    assert (briefing.status, briefing.consecutive_failures) == ("paused", 2)
    assert (briefing.pause.reason, briefing.pause.run_id) == ("failure_limit", second.pk)

    services.resume_schedule(briefing, by=owner)
    assert (briefing.status, briefing.consecutive_failures) == ("active", 2)  # resume keeps the count

    agent.model = "sim-research"  # repaired
    agent.save()
    third = run_due(briefing)
    assert third.status == "completed"
    assert briefing.consecutive_failures == 0

    for conversation in Conversation.objects.all():
        delete_conversation(conversation)
    assert not Run.objects.exists()

    events = [
        e.payload
        for e in AccountingEvent.objects.filter(schedule_id=briefing.pk).order_by("created_at", "id")
    ]
    assert [(e["run_id"], e["status"], e["failure"]) for e in events] == [
        (first.pk, "failed", {"reason": "budget_exhausted", "error_class": "BudgetExhausted"}),
        (
            second.pk,
            "failed",
            {
                "reason": "provider_error",
                "error_class": "ProviderTransientError",
                "provider": "simulated",
                "provider_code": "overloaded_error",
                "http_status": 529,
            },
        ),
        (third.pk, "completed", None),
    ]
    assert [e["revision"] for e in events] == [2, 2, 2]
    pauses = PauseEvent.objects.filter(schedule=briefing).order_by("created_at", "id")
    assert [(p.action, p.reason, p.failures_at_event, p.run_id) for p in pauses] == [
        ("pause", "failure_limit", 2, second.pk),
        ("resume", "", 2, None),
    ]
