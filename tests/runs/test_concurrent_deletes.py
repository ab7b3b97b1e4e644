"""Deleting one conversation from several requests at once (four API clients, a double-submitted
dashboard form): one deletes it, the others are told it is gone, never a 500. The row vanishing
between a request's ownership check and its locked read once raised straight through."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.models import Conversation, Run
from tests.api.conftest import Api, token_for
from tests.concurrency import race
from tests.factories import answered_conversation, make_agent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("deleters", [4, 20])
def test_concurrent_api_deletes_answer_one_204_and_404s(owner, deleters):
    conversation = answered_conversation(owner, make_agent("helper"))
    api = Api(token_for(owner, "read", "write"))
    statuses = race([lambda: api.delete(f"/conversations/{conversation.pk}").status_code] * deleters)
    assert sorted(statuses) == [204] + [404] * (deleters - 1), statuses
    assert not Conversation.objects.exists() and not Run.objects.exists()


def test_a_double_submitted_delete_shows_the_list_with_a_notice(owner):
    conversation = answered_conversation(owner, make_agent("helper"))
    clients = [Client(), Client()]
    for client in clients:
        client.force_login(owner)

    def delete(client: Client) -> tuple[int, str]:
        response = client.post(f"/conversations/{conversation.pk}/delete/", follow=True)
        return response.status_code, response.content.decode()

    results = race([lambda c=c: delete(c) for c in clients])
    assert all(not isinstance(result, Exception) for result in results), results
    statuses = sorted(status for status, _ in results)
    assert statuses in ([200, 200], [200, 404]), statuses  # 404: it was gone before its check
    pages = [page for status, page in results if status == 200]
    assert any("Deleted" in page for page in pages)
    assert all("Conversations" in page for page in pages)  # each 200 is the list, with its notice
    assert not Conversation.objects.exists()
