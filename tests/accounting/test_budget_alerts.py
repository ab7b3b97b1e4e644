"""Threshold alerts (docs/contract.md#threshold-alerts): judged at admission and after each charge,
recorded once per threshold and period even when fifty runs cross together, told through the one
notices outbox, re-armed when a ceiling is raised, shown in the top bar until the period ends."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core import mail
from django.db.models import Q
from django.test import Client

from accounting import alerts, ledger
from accounting.models import BudgetAlert, OwnerBudget
from runs.steps import judge_alerts
from schedules import tasks
from schedules.models import Notice
from tests.concurrency import race
from tests.factories import make_user, spend

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 12, 10, 10, 0, tzinfo=UTC)  # 12:00 in Europe/Riga


def charge(owner_id: int, cost: str, *, run_id: int = 1) -> None:
    """A provider call's charge as the run loop writes it, then its judgement (runs.steps)."""
    spend(owner_id, cost, run_id=run_id)
    judge_alerts(ledger.Call(owner_id, run_id, None, "simulated", "m", 1, 1, Decimal(cost), NOON))


@pytest.fixture
def frozen():
    with time_machine.travel(NOON, tick=False):
        yield


def crossed(owner_id: int) -> set[tuple[str, int]]:
    return {
        (a.period, a.threshold)
        for a in BudgetAlert.objects.filter(owner_id=owner_id, rearmed_at__isnull=True)
    }


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([0], "outside 1-100"),
        ([101], "outside 1-100"),
        ([50, 50], "once"),
        ([10, 20, 30, 40, 50, 60], "at most 5"),
        (["50"], "not a whole percentage"),
        ([True], "not a whole percentage"),
        ([50.5], "not a whole percentage"),
        ([None], "not a whole percentage"),
        ("50,80", "list"),
        ({"a": 1}, "list"),
    ],
)
def test_thresholds_outside_the_rules_are_refused_with_the_reason(value, words):
    with pytest.raises(alerts.InvalidThresholds, match=words):
        alerts.parse_thresholds(value)


def test_thresholds_are_kept_ascending_and_an_empty_list_turns_alerts_off(owner, frozen):
    assert alerts.set_thresholds(owner.pk, [100, 25]) == [25, 100]
    assert OwnerBudget.objects.get(owner=owner).alert_thresholds == [25, 100]
    alerts.set_thresholds(owner.pk, [])
    charge(owner.pk, "30.00")
    assert crossed(owner.pk) == set()
    assert not Notice.objects.filter(kind=Notice.Kind.BUDGET).exists()


def test_an_admission_that_reaches_half_the_daily_ceiling_tells_once(owner, frozen):
    # Default ceilings: USD 25 a day, USD 250 a month; thresholds 50, 80, 100.
    alerts.admit_one(owner.pk, run_id=1, amount=Decimal("10.00"))
    assert crossed(owner.pk) == set()
    alerts.admit_one(owner.pk, run_id=2, amount=Decimal("2.50"))  # 12.50 of 25: 50 % exactly
    assert crossed(owner.pk) == {("day", 50)}
    alerts.admit_one(owner.pk, run_id=3, amount=Decimal("1.00"))  # still between 50 and 80
    assert Notice.objects.filter(kind=Notice.Kind.BUDGET, owner=owner).count() == 1


def test_one_charge_that_crosses_two_thresholds_sends_one_notice_naming_both(owner, frozen):
    owner.email = "olga@example.com"
    owner.save(update_fields=["email"])
    charge(owner.pk, "21.00")  # 84 % of the day

    assert crossed(owner.pk) == {("day", 50), ("day", 80)}
    assert Notice.objects.filter(kind=Notice.Kind.BUDGET, owner=owner).count() == 1
    tasks.notify()
    assert len(mail.outbox) == 1
    email = mail.outbox[0]
    assert email.subject == "Budget: 80 % of your daily budget reached"
    assert "You have reached 50 % of your daily budget: USD 21.00 of USD 25.00" in email.body
    assert "You have reached 80 % of your daily budget" in email.body
    assert "/budget/" in email.body


@pytest.mark.django_db(transaction=True)
def test_fifty_runs_crossing_together_record_each_threshold_once(frozen):
    owner = make_user()
    spend(owner.pk, "12.00")  # 48 %

    results = race([lambda i=i: charge(owner.pk, "0.40", run_id=100 + i) for i in range(50)])

    assert not [r for r in results if isinstance(r, Exception)]
    # 12 + 50 x 0.40 = 32.00: past 100 % of the day (25), 12.8 % of the month.
    assert crossed(owner.pk) == {("day", 50), ("day", 80), ("day", 100)}
    assert BudgetAlert.objects.filter(owner=owner).count() == 3
    notices = Notice.objects.filter(kind=Notice.Kind.BUDGET, owner=owner)
    named = sorted(n.budget_alert.threshold for n in notices)
    # Each threshold told by exactly one notice (a judge may record one or several at once).
    assert sum(BudgetAlert.objects.filter(batch=n.budget_alert.batch).count() for n in notices) == 3
    assert named == sorted(set(named))


def test_a_raised_ceiling_rearms_the_thresholds_above_the_new_level(owner, admin_user, frozen):
    charge(owner.pk, "21.00")  # 84 % of 25
    assert crossed(owner.pk) == {("day", 50), ("day", 80)}
    client = Client()
    client.force_login(admin_user)
    admin_user.is_superuser = True
    admin_user.save(update_fields=["is_superuser"])
    budget = OwnerBudget.objects.get(owner=owner)

    response = client.post(
        f"/admin/accounting/ownerbudget/{budget.pk}/change/",
        {"owner": owner.pk, "timezone": "Europe/Riga", "daily_ceiling": "40.00"},
    )

    assert response.status_code == 302
    # 21 of 40 is 52.5 %: 50 stays told, 80 is armed again.
    assert crossed(owner.pk) == {("day", 50)}
    charge(owner.pk, "12.00", run_id=2)  # 33 of 40: 82.5 %
    assert crossed(owner.pk) == {("day", 50), ("day", 80)}
    assert Notice.objects.filter(kind=Notice.Kind.BUDGET, owner=owner).count() == 2


def test_a_new_day_arms_the_daily_thresholds_again(owner):
    with time_machine.travel(NOON, tick=False):
        charge(owner.pk, "13.00")
    with time_machine.travel(NOON + timedelta(days=1), tick=False):
        charge(owner.pk, "13.00", run_id=2)
        assert crossed(owner.pk) == {("day", 50)}
    assert BudgetAlert.objects.filter(owner=owner, period="day", threshold=50).count() == 2


def test_the_top_bar_shows_the_highest_threshold_crossed_until_the_period_ends(owner, owner_client):
    with time_machine.travel(NOON, tick=False):
        charge(owner.pk, "21.00")
        page = owner_client.get("/").content.decode()
        assert "80 % of today\u2019s budget used" in page
    with time_machine.travel(NOON + timedelta(days=1), tick=False):
        page = owner_client.get("/").content.decode()
        assert "of today\u2019s budget used" not in page


def test_another_owners_spend_tells_this_owner_nothing(owner, other_owner, frozen):
    charge(other_owner.pk, "24.00")
    assert crossed(owner.pk) == set()
    assert not Notice.objects.filter(owner=owner).exists()


@pytest.mark.parametrize("zone", ["Europe/Riga", "Asia/Kathmandu", "America/St_Johns", "Not/A_Zone"])
def test_the_fast_standing_after_a_charge_agrees_with_the_budget_summary(zone):
    owner = make_user(tz="UTC")
    OwnerBudget.objects.filter(owner=owner).update(timezone=zone, monthly_ceiling=Decimal("90.00"))
    for hours in (1, 20, 30, 24 * 9, 24 * 40):
        spend(owner.pk, "1.25", at=NOON - timedelta(hours=hours))
    spend(owner.pk, "0.50", at=NOON)
    alerts.admit_one(owner.pk, run_id=7, amount=Decimal("2.00"), now=NOON)

    with time_machine.travel(NOON + timedelta(minutes=7), tick=False):
        summary, thresholds = alerts.standing(owner.pk, NOON + timedelta(minutes=7))
        assert summary == ledger.summarize(owner.pk, now=NOON + timedelta(minutes=7))
    assert thresholds == [50, 80, 100]
    assert alerts.standing(10**9, NOON) is None


def test_a_charge_that_cannot_reach_a_threshold_reads_nothing(owner, frozen, django_assert_num_queries):
    charge(owner.pk, "1.00")  # the first charge reads where the owner stands: 1 of 25 today
    with django_assert_num_queries(1):  # only the charge's own write (tests.factories.spend)
        charge(owner.pk, "2.00")  # 3 of 25: 12.50 is still 9.50 away
    with django_assert_num_queries(1):
        charge(owner.pk, "9.00")  # 12 of 25: still short of 12.50
    assert crossed(owner.pk) == set()
    charge(owner.pk, "0.50")  # 12.50: this one could reach 50 % and is judged
    assert crossed(owner.pk) == {("day", 50)}
    with django_assert_num_queries(1):  # 50 % is told; 80 % (20.00) is 7.50 away
        charge(owner.pk, "7.00")
    charge(owner.pk, "0.50")
    assert crossed(owner.pk) == {("day", 50), ("day", 80)}
    assert Notice.objects.filter(kind=Notice.Kind.BUDGET).count() == 2


def test_charges_made_elsewhere_are_seen_within_the_recheck_interval(owner):
    # Another process's charges move the level without this process knowing: this one's reading
    # of the owner is trusted for RECHECK_SECONDS at most, then read again at the next charge.
    with time_machine.travel(NOON, tick=False):
        charge(owner.pk, "1.00")
        spend(owner.pk, "12.00", run_id=2)  # another process: 13 of 25, past 50 %
        charge(owner.pk, "0.10")  # within the interval: this process still believes 1.00
        assert crossed(owner.pk) == set()
    with time_machine.travel(NOON, tick=False):
        alerts._seen[owner.pk].read_at -= alerts.RECHECK_SECONDS  # as if the interval has passed
        charge(owner.pk, "0.10")
        assert crossed(owner.pk) == {("day", 50)}


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Riga", "UTC"])
@pytest.mark.parametrize(
    "now",
    [
        datetime(2026, 12, 1, 0, 30, tzinfo=UTC),  # a new month in UTC, not yet west of it
        datetime(2026, 11, 30, 11, 0, tzinfo=UTC),  # already December east of +13
        datetime(2026, 12, 31, 23, 59, tzinfo=UTC),
        NOON,
    ],
    ids=str,
)
def test_the_alerts_read_with_the_budget_row_are_those_the_alert_table_holds(zone, now):
    """The top bar's alerts come with the budget row (alerts.recent_alerts); they are exactly what
    reading the alert table for the owner's current day and month finds, at any hour in any zone."""
    owner = make_user(tz="UTC")
    OwnerBudget.objects.filter(owner=owner).update(timezone=zone)
    day = now.date()
    starts = {"day": [day + timedelta(days=d) for d in (-2, -1, 0, 1)]}
    starts["month"] = [date(2026, 10, 1), date(2026, 11, 1), date(2026, 12, 1), date(2027, 1, 1)]
    for period, dates in starts.items():
        for start in dates:
            for threshold, rearmed in ((50, None), (80, now), (80, None)):
                BudgetAlert.objects.create(
                    owner=owner,
                    period=period,
                    period_start=start,
                    threshold=threshold,
                    ceiling=Decimal("25.000001"),
                    level=Decimal("20.123456"),
                    created_at=now - timedelta(minutes=threshold),
                    batch=uuid.uuid4(),
                    rearmed_at=rearmed,
                )
    local = now.astimezone(ZoneInfo(zone)).date()
    held = BudgetAlert.objects.filter(owner=owner, rearmed_at__isnull=True).filter(
        Q(period="day", period_start=local) | Q(period="month", period_start=local.replace(day=1))
    )
    with time_machine.travel(now, tick=False):
        summary = ledger.summarize(owner.pk, now=now)
        budget = ledger.budget_row(owner.pk, recent_alerts=alerts.recent_alerts())
        read_alone = alerts.crossed(owner.pk, summary, now=now)
        recent = alerts.recent_of(budget.recent_alerts)
        read_with_row = alerts.crossed(owner.pk, summary, now=now, recent=recent)

    fields = ["pk", "owner_id", "period", "period_start", "threshold", "ceiling", "level", "created_at"]
    fields.append("batch")
    expected = [[getattr(a, f) for f in fields] for a in held.order_by("-threshold", "period")]
    assert len(expected) == 4  # 50 and 80 % of the owner's current day and month
    assert [[getattr(a, f) for f in fields] for a in read_with_row] == expected
    assert [[getattr(a, f) for f in fields] for a in read_alone] == expected
