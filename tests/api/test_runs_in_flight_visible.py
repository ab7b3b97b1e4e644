"""Runs in flight and queued, where owners and admins look: the dashboard's strip, the API and the
admin's run list (docs/decisions/0005-runs-in-flight.md)."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.services import claim_run
from tests.factories import make_agent, make_user, start_interactive_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def flying(owner, other_owner, agent):
    """The owner: two running (one worker), one queued; another owner: one running elsewhere."""
    mine = [start_interactive_run(owner.pk, agent, "Research.") for _ in range(3)]
    for run in mine[:2]:
        claim_run(run)
    theirs = start_interactive_run(other_owner.pk, agent, "Research.")
    claim_run(theirs)
    type(theirs).objects.filter(pk=theirs.pk).update(worker="box-2:4242")
    return mine, theirs


def test_the_owner_sees_their_runs_in_flight_and_queued_and_the_strip_polls(owner_client, flying):
    page = owner_client.get("/").content.decode()
    assert "2 running" in page and "1 queued" in page and "of your runs" in page
    assert 'hx-trigger="every 5s"' in page
    assert "box-2:4242" not in page  # no worker names for an owner

    strip = owner_client.get("/runs/in-flight/", HTTP_HX_REQUEST="true").content.decode()
    assert "2 running" in strip and "1 queued" in strip


def test_an_owner_with_nothing_in_flight_is_told_so_and_nothing_polls(db):
    client = Client()
    client.force_login(make_user("idle"))
    page = client.get("/").content.decode()
    assert "No runs in flight" in page and "every 5s" not in page


def test_an_admin_sees_every_owners_runs_per_worker(admin_user, flying):
    client = Client()
    client.force_login(admin_user)
    page = client.get("/").content.decode()
    assert "3 running" in page and "1 queued" in page and "runs of every owner" in page
    assert "box-2:4242" in page and "— 1 running" in page


def test_the_api_counts_an_owners_runs_and_an_admins_per_worker(owner_api, admin_api, other_api, flying):
    mine = owner_api.get("/runs/in-flight").json()
    assert mine == {"scope": "owner", "running": 2, "queued": 1, "workers": []}
    assert other_api.get("/runs/in-flight").json()["running"] == 1
    everyone = admin_api.get("/runs/in-flight").json()
    assert (everyone["scope"], everyone["running"], everyone["queued"]) == ("all", 3, 1)
    workers = {w["worker"]: w["running"] for w in everyone["workers"]}
    assert workers["box-2:4242"] == 1 and sum(workers.values()) == 3


def test_the_admin_run_list_filters_by_the_worker_holding_runs(admin_user, flying):
    client = Client()
    client.force_login(admin_user)
    listing = client.get("/admin/runs/run/").content.decode()
    assert "worker (runs in flight)" in listing and "box-2:4242" in listing
    only = client.get("/admin/runs/run/?worker=box-2:4242").content.decode()
    assert "1 run" in only


def test_a_delegated_child_is_not_counted_twice(owner_client, owner, flying):
    mine, _ = flying
    child_agent = make_agent("helper", model="sim-research")
    from runs.models import Run
    from runs.services import create_run

    create_run(
        owner.pk,
        child_agent,
        "Help.",
        conversation=mine[0].conversation,
        limits=mine[0].run_limits,
        kind=Run.Kind.DELEGATED,
        parent=mine[0],
        attempt=mine[0].attempt,
    )
    assert "2 running" in owner_client.get("/").content.decode()


def test_the_admin_run_list_filters_by_a_worker_when_nothing_is_in_flight(admin_user, owner, agent):
    """A link to the runs of a worker that has finished them (or was lost) lists those runs alone,
    not every run, also when no run is in flight anywhere: the filter offers the chosen worker."""
    from runs.models import Run

    runs = [start_interactive_run(owner.pk, agent, "Research.") for _ in range(5)]
    for run, worker in zip(runs, ("box-3:77", "box-4:88", "box-3:77", "box-4:88", ""), strict=True):
        Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED, worker=worker)
    client = Client()
    client.force_login(admin_user)
    only = client.get("/admin/runs/run/?worker=box-3:77").content.decode()
    assert only.count('<th class="field-id">') == 2
    assert only.index(f">{runs[2].pk}</a>") < only.index(f">{runs[0].pk}</a>")  # newest first
    assert client.get("/admin/runs/run/?worker=box-9:1").content.decode().count('<th class="field-id">') == 0


@pytest.fixture
def one_worker_lost(flying, settings):
    """box-2's heartbeat is older than the lease (its host killed, paused or cut off); the
    owner's worker beat just now."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.models import Run

    _, theirs = flying
    silent = timezone.now() - timedelta(seconds=settings.RUN_LEASE_SECONDS + 30)
    Run.objects.filter(pk=theirs.pk).update(heartbeat_at=silent)
    return theirs


def test_an_admin_sees_a_worker_that_stopped_heartbeating_as_lost_in_words_and_colour(
    admin_user, one_worker_lost
):
    client = Client()
    client.force_login(admin_user)
    strip = client.get("/runs/in-flight/", HTTP_HX_REQUEST="true").content.decode()
    assert '<span class="badge badge--bad">' in strip and "1 worker lost" in strip
    lost_line = next(line for line in strip.split("<li>") if "box-2:4242" in line)
    assert "Lost" in lost_line and "no heartbeat since" in lost_line and "worker lost" in lost_line
    live_line = next(line for line in strip.split("<li>") if "box-2:4242" not in line and "running" in line)
    assert "Lost" not in live_line


def test_the_api_names_each_workers_host_and_whether_it_is_lost(admin_api, one_worker_lost):
    workers = {w["worker"]: w for w in admin_api.get("/runs/in-flight").json()["workers"]}
    lost = workers.pop("box-2:4242")
    assert lost["host"] == "box-2" and lost["lost"] is True and lost["last_heartbeat_at"]
    (live,) = workers.values()
    assert live["lost"] is False and live["worker"] == f"{live['host']}:{live['worker'].rsplit(':', 1)[1]}"


def test_the_admins_worker_filter_says_which_worker_is_lost(admin_user, one_worker_lost):
    client = Client()
    client.force_login(admin_user)
    listing = client.get("/admin/runs/run/").content.decode()
    assert "box-2:4242 (1 running, lost: no heartbeat within the lease)" in listing


def test_a_worker_names_its_host_as_worker_host_says(owner, agent, settings):
    settings.WORKER_HOST = "rack-3-node-7"
    run = start_interactive_run(owner.pk, agent, "Research.")
    claim_run(run)
    assert run.worker.startswith("rack-3-node-7:")
