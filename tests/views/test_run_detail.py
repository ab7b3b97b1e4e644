"""The run page: a bar per dimension with its reserve, the synthesis highlight, the failure
classification with its message, the transcript, and polling that stops when the run ends."""

from __future__ import annotations

import html
import re

import pytest

from runs.models import Run
from tests.factories import fail, finish, make_agent, make_schedule, materialize, run_due
from tests.views.conftest import HTMX, overloaded

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_a_run_that_completed_through_its_reserve_highlights_the_dimension(owner, owner_client):
    agent = make_agent("looper", model="sim-tool-loop")
    schedule = make_schedule(owner, agent)
    run = run_due(schedule)
    assert run is not None and run.status == Run.Status.COMPLETED and run.synthesis_dimension
    response = owner_client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    text = _text(response.text)
    assert run.synthesis_dimension == "tool_calls"  # its tool budget ran out: one synthesis turn owed
    assert "the tool-call budget was used up, which owes the run one synthesis-only turn" in text
    assert f"activated synthesis at step {run.synthesis_step}" in text
    assert 'class="bar bar--activated"' in response.text
    assert f"{run.steps} of 10 steps" in text and "reserve 2" in text
    assert "synthesis-only" in text
    assert "Calls <code>" in response.text or "Calls clock" in text
    assert "Tool result" in text


def test_a_failed_run_shows_its_classification_diagnostics_and_message(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    run = fail(materialize(schedule), overloaded())
    text = _text(owner_client.get(f"/runs/{run.pk}/").text)
    assert "The AI provider was overloaded — usually temporary." in text  # words first, codes after
    assert "provider error · transient · HTTP 529 · overloaded_error · anthropic" in text
    assert "ProviderTransientError" in text
    assert "Transient: retried within the run, then given up" in text
    assert "HTTP status 529" in text and "Provider code overloaded_error" in text
    assert "Overloaded: the prompt said 'secret plans'" in html.unescape(text)


def test_a_budget_exhausted_run_marks_the_dimension_used_up(owner, owner_client, agent):
    run = fail(materialize(make_schedule(owner, agent)))
    html = owner_client.get(f"/runs/{run.pk}/").text
    assert "used up: the run failed here" in html
    assert html.count("bar--exhausted") == 1


def test_a_running_run_polls_and_the_poll_continues_while_it_runs(owner, owner_client, agent):
    occurrence = materialize(make_schedule(owner, agent))
    page = owner_client.get(f"/runs/{occurrence.run_id}/")
    assert 'hx-trigger="every 2s"' in page.text
    poll = owner_client.get(f"/runs/{occurrence.run_id}/", headers=HTMX)
    assert poll.status_code == 200
    assert poll.text.lstrip().startswith('<div id="run-live"')
    assert 'hx-trigger="every 2s"' in poll.text
    assert "HX-Request" in poll["Vary"]


def test_polling_stops_with_286_when_the_run_has_ended(owner, owner_client, agent):
    occurrence = materialize(make_schedule(owner, agent))
    finish(occurrence)
    poll = owner_client.get(f"/runs/{occurrence.run_id}/", headers=HTMX)
    assert poll.status_code == 286
    assert "hx-trigger" not in poll.text
    assert "Completed" in poll.text


def test_another_owners_run_is_404(other_client, owner, agent):
    run = finish(materialize(make_schedule(owner, agent)))
    assert other_client.get(f"/runs/{run.pk}/").status_code == 404
    assert other_client.get(f"/runs/{run.pk}/", headers=HTMX).status_code == 404


def test_the_run_page_costs_a_fixed_number_of_queries(owner, owner_client, django_assert_max_num_queries):
    agent = make_agent("looper", model="sim-tool-loop")
    run = run_due(make_schedule(owner, agent))
    assert run is not None and run.transcript.count() > 5
    with django_assert_max_num_queries(10):
        owner_client.get(f"/runs/{run.pk}/")


def test_a_reserve_reached_on_another_dimension_is_named(owner, owner_client, agent):
    run = finish(materialize(make_schedule(owner, agent)))
    Run.objects.filter(pk=run.pk).update(synthesis_dimension="model_calls", synthesis_step=9)
    text = _text(owner_client.get(f"/runs/{run.pk}/").text)
    assert "From step 9 the requests were synthesis-only : the model calls reserve was reached" in text
