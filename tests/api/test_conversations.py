"""DELETE /api/v1/conversations/{id}: deletes its runs; spend and accounting events stay."""

from __future__ import annotations

import pytest

from accounting.models import AccountingEvent
from runs.models import Conversation, Run
from tests.api.conftest import error_of
from tests.factories import fail, make_schedule, materialize

pytestmark = pytest.mark.django_db


def test_deleting_a_conversation_answers_204_and_keeps_the_accounting(owner, agent, owner_api):
    schedule = make_schedule(owner, agent)
    run = fail(materialize(schedule))

    response = owner_api.delete(f"/conversations/{run.conversation_id}")

    assert response.status_code == 204
    assert response.content == b""
    assert not Conversation.objects.filter(pk=run.conversation_id).exists()
    assert not Run.objects.filter(pk=run.pk).exists()
    assert AccountingEvent.objects.filter(run_id=run.pk).exists()
    assert owner_api.get(f"/runs/{run.pk}").status_code == 404
    again = owner_api.delete(f"/conversations/{run.conversation_id}")
    assert again.status_code == 404


def test_a_conversation_with_a_run_in_flight_is_409_conversation_busy(owner, agent, owner_api):
    occurrence = materialize(make_schedule(owner, agent))
    run = Run.objects.get(pk=occurrence.run_id)

    response = owner_api.delete(f"/conversations/{run.conversation_id}")

    assert response.status_code == 409
    assert error_of(response)["code"] == "conversation_busy"
    assert Run.objects.filter(pk=run.pk).exists()


def test_another_owners_conversation_is_404(owner, agent, other_api, admin_api):
    run = fail(materialize(make_schedule(owner, agent)))

    assert other_api.delete(f"/conversations/{run.conversation_id}").status_code == 404
    assert admin_api.delete(f"/conversations/{run.conversation_id}").status_code == 404
    assert Conversation.objects.filter(pk=run.conversation_id).exists()


def test_a_read_only_token_cannot_delete(owner, agent, api_as):
    run = fail(materialize(make_schedule(owner, agent)))

    response = api_as(owner, "read").delete(f"/conversations/{run.conversation_id}")

    assert response.status_code == 403
    assert Conversation.objects.filter(pk=run.conversation_id).exists()
