"""The forecast's inputs, kept current per owner (ForecastState, ForecastGroup, ForecastInput in
schedules.models), so that the month's forecast reads a few rows however many schedules the owner
has (docs/performance.md), as the spend rollups do for spend.

What moves the inputs, and who keeps them current:

- a schedule created, paused, resumed, completed, given a new revision (its cadence, cost limit or
  cap) or deleted: `sync` (or `forget`), in the transaction of that change (schedules.services);
- a run of a schedule completed (its expected cost per run, the median of its last 20 completed
  runs, may change): `recount`, in the transaction that accounts the run;
- time passing (a new owner-local day or month, or a new zone for the owner): `move_on_due`, by the
  tick, which recomputes the owner's fires for the new day.

Every writer holds the owner's ForecastState row lock, so an owner's rows change one writer at a
time, whatever the order of the schedules they touch; the lock is taken after the schedule rows a
write path already holds, and nothing else is locked after it. `expected` recomputes an owner's rows
from the schedules, as `manage.py check_forecast` compares them; `rebuild` writes that recomputation.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from accounting.ledger import ZERO
from accounting.models import AccountingEvent, OwnerBudget
from accounting.selectors import owner_timezone
from accounting.timezones import default_time_zone, is_time_zone, owner_zone
from schedules.forecast.cadence import Cadence, MonthFires, month_fires
from schedules.forecast.inputs import GroupKey, Input
from schedules.models import ForecastGroup, ForecastInput, ForecastState, Schedule

RECENT_RUNS = 20  # the completed runs whose median cost is a schedule's expected cost per run
MOVE_ON_PER_TICK = 200  # owners moved on to a new day by one tick; the rest by the next


# -- reading what the inputs should be ----------------------------------------------------------


def per_fire_costs(schedule_ids: Iterable[int]) -> dict[int, Decimal]:
    """The median cost of each schedule's last RECENT_RUNS completed runs, as their
    `schedule.run_accounted` events recorded it (those outlive the runs' conversations); a schedule
    with none is absent. One query, reading each schedule's newest events by its index."""
    ids = sorted(set(schedule_ids))
    if not ids:
        return {}
    sql = f"""
        SELECT s.id, recent.cost FROM unnest(%s::bigint[]) AS s(id)
        CROSS JOIN LATERAL (
            SELECT (e.payload -> 'usage' ->> 'cost')::numeric AS cost
            FROM "{AccountingEvent._meta.db_table}" e
            WHERE e.schedule_id = s.id AND e.event = %s AND e.payload ->> 'status' = 'completed'
            ORDER BY e.created_at DESC, e.id DESC LIMIT %s
        ) AS recent"""  # noqa: S608 - the table name comes from model metadata
    costs: dict[int, list[Decimal]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [ids, AccountingEvent.Kind.RUN_ACCOUNTED, RECENT_RUNS])
        for schedule_id, cost in cursor.fetchall():
            costs.setdefault(schedule_id, []).append(cost)
    return {key: _median(values) for key, values in costs.items()}


def _median(values: list[Decimal]) -> Decimal:
    return Decimal(statistics.median(values)).quantize(Decimal("0.000001"))


@dataclass(frozen=True)
class Planned:
    """What an active schedule's forecast input follows from: its cadence, cost limit and cap."""

    schedule_id: int
    owner_id: int
    cadence: Cadence
    max_cost: Decimal
    monthly_cap: Decimal | None

    def with_cost(self, median: Decimal | None) -> Input:
        per_fire = self.max_cost if median is None else min(median, self.max_cost)
        return Input(self.schedule_id, self.cadence, self.max_cost, self.monthly_cap, per_fire)


def planned(schedules: Q) -> tuple[dict[int, Planned], dict[int, int]]:
    """The schedules among `schedules` with runs left as Planned (one query of plain values), and
    every matching schedule's owner. A schedule has runs left while it is active, except a one-time
    schedule the tick has fired (it has no next slot): its only slot is behind it."""
    rows = Schedule.objects.filter(schedules).values_list(
        "pk",
        "owner_id",
        "status",
        "kind",
        "next_occurrence_at",
        "current_revision__cron",
        "current_revision__timezone",
        "current_revision__run_at",
        "current_revision__limits__max_cost",
        "current_revision__monthly_cap",
    )
    found: dict[int, Planned] = {}
    owners: dict[int, int] = {}
    for pk, owner_id, status, kind, next_slot, cron, tz, run_at, max_cost, cap in rows:
        owners[pk] = owner_id
        fired = kind == Schedule.Kind.ONE_TIME and next_slot is None
        if status == Schedule.Status.ACTIVE and not fired and tz is not None and max_cost is not None:
            cadence = Cadence(kind, cron or "", tz, run_at)
            found[pk] = Planned(pk, owner_id, cadence, Decimal(str(max_cost)), cap)
    return found, owners


def fires_of(cadence: Cadence, *, day: date, zone_name: str) -> MonthFires:
    """One member's fires in the owner's month of `day`; none for a definition that no longer
    parses (the tick pauses such a schedule with its reason)."""
    zone = owner_zone(zone_name)
    try:
        return month_fires(cadence, day=day, zone=zone)
    except ValueError:
        start = day.replace(day=1)
        length = ((start + timedelta(days=32)).replace(day=1) - start).days
        return MonthFires(start, (0,) * length, day, ())


def first_minute_of(cadence: Cadence) -> int:
    try:
        return cadence.first_minute
    except ValueError:
        return 0


# -- the owner's lock and day ----------------------------------------------------------------------


def _zone_name(owner_id: int) -> str:
    return owner_timezone(owner_id)


def _day_of(now: datetime, zone_name: str) -> tuple[date, datetime]:
    """The owner-local date at `now`, and the instant its next day starts."""
    zone = owner_zone(zone_name)
    today = now.astimezone(zone).date()
    return today, datetime.combine(today + timedelta(days=1), time.min, tzinfo=zone)


def _lock(owner_id: int, now: datetime) -> ForecastState:
    """The owner's ForecastState, created if need be, locked for this transaction, and moved on to
    the owner's current day and zone first if it was behind."""
    state = ForecastState.objects.select_for_update().filter(owner_id=owner_id).first()
    zone_name = _zone_name(owner_id)
    today, until = _day_of(now, zone_name)
    if state is None:
        ForecastState.objects.bulk_create(
            [ForecastState(owner_id=owner_id, timezone=zone_name, day=today, valid_until=until)],
            ignore_conflicts=True,
        )
        state = ForecastState.objects.select_for_update().get(owner_id=owner_id)
    if state.day != today or state.timezone != zone_name:
        _move_on(state, day=today, zone_name=zone_name, until=until)
    return state


def _move_on(state: ForecastState, *, day: date, zone_name: str, until: datetime) -> None:
    """Recompute the owner's fires for `day` in `zone_name` (the caller holds the state's lock)."""
    groups = list(ForecastGroup.objects.filter(owner_id=state.owner_id))
    counted: dict[Cadence, MonthFires] = {}
    for group in groups:
        cadence = cadence_of(group)
        if cadence not in counted:
            counted[cadence] = fires_of(cadence, day=day, zone_name=zone_name)
        fires = counted[cadence]
        group.fires, group.today = list(fires.per_day), list(fires.today)
        group.day, group.owner_timezone = day, zone_name
    ForecastGroup.objects.bulk_update(groups, ["fires", "today", "day", "owner_timezone"], batch_size=500)
    ForecastState.objects.filter(owner_id=state.owner_id).update(
        day=day, timezone=zone_name, valid_until=until
    )
    state.day, state.timezone, state.valid_until = day, zone_name, until


def move_on_due(now: datetime | None = None, *, limit: int = MOVE_ON_PER_TICK) -> int:
    """The tick's part: owners whose day ended (or whose zone changed) get their fires recomputed for
    the new day, each in a transaction of its own, skipping an owner another writer holds (the next
    tick takes it). How many were moved on. Idempotent."""
    now = now or timezone.now()
    zones = OwnerBudget.objects.filter(owner_id=OuterRef("owner_id")).values("timezone")[:1]
    candidates = list(
        ForecastState.objects.annotate(zone=Subquery(zones))
        .filter(Q(valid_until__lte=now) | Q(zone__isnull=True) | ~Q(timezone=F("zone")))
        .order_by("valid_until")
        .values_list("owner_id", "timezone", "zone", "day")[: limit * 2]
    )
    moved = 0
    for owner_id, stored_zone, raw_zone, day in candidates:
        zone_name = raw_zone if is_time_zone(raw_zone) else default_time_zone()
        today, until = _day_of(now, zone_name)
        if day == today and stored_zone == zone_name:
            continue  # an unusable zone name, read as the default: nothing changed
        with transaction.atomic():
            state = (
                ForecastState.objects.select_for_update(skip_locked=True).filter(owner_id=owner_id).first()
            )
            if state is not None and (state.day != today or state.timezone != zone_name):
                _move_on(state, day=today, zone_name=zone_name, until=until)
                moved += 1
        if moved >= limit:
            break
    return moved


def cadence_of(group: ForecastGroup) -> Cadence:
    return Cadence(group.kind, group.cron, group.timezone, group.run_at)


def key_of(group: ForecastGroup) -> GroupKey:
    return GroupKey(cadence_of(group), group.max_cost, group.monthly_cap, group.solo)


# -- writing -----------------------------------------------------------------------------------------


def sync(schedule_ids: Iterable[int], *, now: datetime | None = None, recount: Iterable[int] = ()) -> None:
    """Bring these schedules' forecast inputs in line with what they are now: an active schedule
    has its input in its group; a paused, completed or deleted one has none. A schedule keeps its
    expected cost per run unless it is new to the forecast, its cost limit changed, or it is in
    `recount`. Inside the caller's transaction, after the schedule rows it locks. Idempotent."""
    ids = sorted(set(schedule_ids))
    if not ids:
        return
    now = now or timezone.now()
    wanted, owners = planned(Q(pk__in=ids))
    inputs: set[int] = set()
    for schedule_id, owner_id in ForecastInput.objects.filter(schedule_id__in=ids).values_list(
        "schedule_id", "owner_id"
    ):
        owners.setdefault(schedule_id, owner_id)
        inputs.add(schedule_id)
    recounted = set(recount)
    # Only the owners with something to write take their lock: a schedule with no runs left and no
    # input (a one-time schedule completed after the tick fired it) writes nothing, so the ends of
    # an owner's burst of one-time runs do not queue on the owner's row. The caller holds these
    # schedules' rows: no other transaction gives them an input meanwhile.
    moving = {owners[pk] for pk in ids if pk in wanted or pk in inputs}
    for owner_id in sorted(moving):
        state = _lock(owner_id, now)
        mine = [pk for pk in ids if owners.get(pk) == owner_id]
        current = {
            i.schedule_id: i
            for i in ForecastInput.objects.filter(schedule_id__in=mine).select_related("group")
        }

        # A schedule keeps its cost per run unless new here, recounted, or given another cost limit.
        kept = {
            pk: current[pk].per_fire
            for pk in mine
            if pk in wanted
            and pk in current
            and pk not in recounted
            and current[pk].group.max_cost == wanted[pk].max_cost
        }
        costs = per_fire_costs(pk for pk in mine if pk in wanted and pk not in kept)
        target = {pk: wanted[pk].with_cost(kept.get(pk, costs.get(pk))) for pk in mine if pk in wanted}
        _apply(state, current, target)


def recount(schedule_id: int, *, now: datetime | None = None) -> None:
    """A run of the schedule completed: its expected cost per run may have moved. Two reads when it
    did not (the common case with a steady cost), `sync` when it did. In the transaction that
    accounts the run, which holds the schedule's row."""
    row = (
        ForecastInput.objects.filter(schedule_id=schedule_id)
        .values_list("per_fire", "group__max_cost")
        .first()
    )
    if row is None:
        return  # not active: nothing to forecast
    per_fire, max_cost = row
    median = per_fire_costs([schedule_id]).get(schedule_id)
    if (max_cost if median is None else min(median, max_cost)) != per_fire:
        sync([schedule_id], now=now, recount=[schedule_id])


def forget(schedule_ids: Iterable[int], *, now: datetime | None = None) -> None:
    """Schedules about to be deleted leave the forecast (their rows would go with them, their groups'
    counts would not). In the deleting transaction."""
    rows = ForecastInput.objects.filter(schedule_id__in=list(schedule_ids)).values_list(
        "schedule_id", "owner_id"
    )
    by_owner: dict[int, list[int]] = {}
    for schedule_id, owner_id in rows:
        by_owner.setdefault(owner_id, []).append(schedule_id)
    for owner_id, mine in sorted(by_owner.items()):
        state = _lock(owner_id, now or timezone.now())
        current = {
            i.schedule_id: i
            for i in ForecastInput.objects.filter(schedule_id__in=mine).select_related("group")
        }
        _apply(state, current, {})


def _apply(state: ForecastState, current: dict[int, ForecastInput], target: dict[int, Input]) -> None:
    """Move the owner's inputs from `current` to `target` (by schedule id; absent: none), adjusting
    their groups' member counts and cost sums; a group left empty is deleted. The caller holds the
    state's lock."""
    members: dict[int, int] = {}  # group id -> members joining (+) or leaving (-)
    sums: dict[int, Decimal] = {}
    joining: dict[GroupKey, list[Input]] = {}
    cost_changed: list[Input] = []
    for pk in sorted(set(current) | set(target)):
        old, new = current.get(pk), target.get(pk)
        if old is not None and new is not None and key_of(old.group) == new.group:
            if old.per_fire != new.per_fire:
                sums[old.group_id] = sums.get(old.group_id, ZERO) + new.per_fire - old.per_fire
                cost_changed.append(new)
            continue
        if old is not None:
            members[old.group_id] = members.get(old.group_id, 0) - 1
            sums[old.group_id] = sums.get(old.group_id, ZERO) - old.per_fire
        if new is not None:
            joining.setdefault(new.group, []).append(new)
    existing = _groups(state.owner_id, list(joining))
    created = []
    for key, joiners in joining.items():
        group = existing.get(key)
        if group is None:
            created.append(_new_group(state, key, joiners))
            continue
        members[group.pk] = members.get(group.pk, 0) + len(joiners)
        sums[group.pk] = sums.get(group.pk, ZERO) + sum((j.per_fire for j in joiners), ZERO)
    ForecastGroup.objects.bulk_create(created)
    group_of = {**{key: g.pk for key, g in existing.items()}, **{key_of(g): g.pk for g in created}}
    for item in cost_changed:
        ForecastInput.objects.filter(schedule_id=item.schedule_id).update(per_fire=item.per_fire)
    moved = [pk for pk in current if pk in target and key_of(current[pk].group) != target[pk].group]
    for pk in moved:
        item = target[pk]
        ForecastInput.objects.filter(schedule_id=pk).update(
            group_id=group_of[item.group], per_fire=item.per_fire
        )
    ForecastInput.objects.filter(schedule_id__in=[pk for pk in current if pk not in target]).delete()
    ForecastInput.objects.bulk_create(
        [
            ForecastInput(
                schedule_id=pk, owner_id=state.owner_id, group_id=group_of[item.group], per_fire=item.per_fire
            )
            for pk, item in target.items()
            if pk not in current
        ]
    )
    counts = dict(ForecastGroup.objects.filter(pk__in=list(members)).values_list("pk", "members"))
    empty = [pk for pk, change in members.items() if counts.get(pk, 0) + change <= 0]
    ForecastGroup.objects.filter(pk__in=empty).delete()
    for pk in set(members) | set(sums):
        if pk in empty:
            continue
        ForecastGroup.objects.filter(pk=pk).update(
            members=F("members") + members.get(pk, 0), per_fire_sum=F("per_fire_sum") + sums.get(pk, ZERO)
        )


def _groups(owner_id: int, keys: list[GroupKey]) -> dict[GroupKey, ForecastGroup]:
    """The owner's groups with these keys (one query)."""
    if not keys:
        return {}
    match = Q()
    for key in keys:
        match |= Q(**_key_columns(key))
    found = {key_of(g): g for g in ForecastGroup.objects.filter(match, owner_id=owner_id)}
    return {key: found[key] for key in keys if key in found}


def _new_group(state: ForecastState, key: GroupKey, joiners: list[Input]) -> ForecastGroup:
    fires = fires_of(key.cadence, day=state.day, zone_name=state.timezone)
    return _group_of(
        state.owner_id, key, _row_of(key, joiners, fires), day=state.day, zone_name=state.timezone
    )


def _key_columns(key: GroupKey) -> dict[str, Any]:
    """The columns of a group that make its key (key_of reads them back)."""
    return {
        "kind": key.cadence.kind,
        "cron": key.cadence.cron,
        "timezone": key.cadence.timezone,
        "run_at": key.cadence.run_at,
        "max_cost": key.max_cost,
        "monthly_cap": key.monthly_cap,
        "solo": key.solo,
    }


def _group_of(owner_id: int, key: GroupKey, row: GroupRow, *, day: date, zone_name: str) -> ForecastGroup:
    """The group row to write for `key` (unsaved): written as the sync creates one and as rebuild does."""
    return ForecastGroup(
        owner_id=owner_id,
        **_key_columns(key),
        members=row.members,
        per_fire_sum=row.per_fire_sum,
        first_minute=row.first_minute,
        day=day,
        owner_timezone=zone_name,
        fires=list(row.fires),
        today=list(row.today),
    )


# -- the recomputation: check_forecast, repairs, the benches' seeds ----------------------------------


@dataclass(frozen=True)
class GroupRow:
    """A group as check_forecast compares it."""

    members: int
    per_fire_sum: Decimal
    first_minute: int
    fires: tuple[int, ...]
    today: tuple[int, ...]


@dataclass(frozen=True)
class Table:
    """An owner's forecast rows: groups by key, and each schedule's group key and cost per run."""

    day: date
    zone_name: str
    groups: dict[GroupKey, GroupRow]
    inputs: dict[int, tuple[GroupKey, Decimal]]


def expected(owner_id: int, *, day: date, zone_name: str) -> Table:
    """The owner's rows recomputed from their schedules and accounted runs, for `day` in `zone_name`."""
    wanted, _ = planned(Q(owner_id=owner_id))
    costs = per_fire_costs(wanted)
    inputs = [plan.with_cost(costs.get(pk)) for pk, plan in wanted.items()]
    by_key: dict[GroupKey, list[Input]] = {}
    for item in inputs:
        by_key.setdefault(item.group, []).append(item)
    counted: dict[Cadence, MonthFires] = {}
    groups = {}
    for key, members in by_key.items():
        if key.cadence not in counted:
            counted[key.cadence] = fires_of(key.cadence, day=day, zone_name=zone_name)
        groups[key] = _row_of(key, members, counted[key.cadence])
    return Table(day, zone_name, groups, {item.schedule_id: (item.group, item.per_fire) for item in inputs})


def _row_of(key: GroupKey, members: list[Input], fires: MonthFires) -> GroupRow:
    """A group's counts: its members, their cost per fire summed, its first minute and its fires."""
    return GroupRow(
        len(members),
        sum((m.per_fire for m in members), ZERO),
        first_minute_of(key.cadence),
        fires.per_day,
        fires.today,
    )


def stored(owner_id: int) -> Table | None:
    """The owner's rows as stored; None if the owner has none."""
    state = ForecastState.objects.filter(owner_id=owner_id).first()
    if state is None:
        return None
    groups = {
        key_of(g): GroupRow(g.members, g.per_fire_sum, g.first_minute, tuple(g.fires), tuple(g.today))
        for g in ForecastGroup.objects.filter(owner_id=owner_id)
    }
    by_id = {g.pk: key_of(g) for g in ForecastGroup.objects.filter(owner_id=owner_id)}
    inputs = {
        schedule_id: (by_id[group_id], per_fire)
        for schedule_id, group_id, per_fire in ForecastInput.objects.filter(owner_id=owner_id).values_list(
            "schedule_id", "group_id", "per_fire"
        )
    }
    return Table(state.day, state.timezone, groups, inputs)


def rebuild(owner_id: int, *, now: datetime | None = None) -> None:
    """Rewrite the owner's rows from the recomputation, under the owner's lock, in the caller's
    transaction (a repair, or rows written by plain SQL such as the benches' seeds)."""
    state = _lock(owner_id, now or timezone.now())
    ForecastInput.objects.filter(owner_id=owner_id).delete()
    ForecastGroup.objects.filter(owner_id=owner_id).delete()
    table = expected(owner_id, day=state.day, zone_name=state.timezone)
    groups = [
        _group_of(owner_id, key, row, day=state.day, zone_name=state.timezone)
        for key, row in table.groups.items()
    ]
    ForecastGroup.objects.bulk_create(groups, batch_size=1_000)
    group_of = {key_of(g): g.pk for g in groups}
    ForecastInput.objects.bulk_create(
        [
            ForecastInput(schedule_id=pk, owner_id=owner_id, group_id=group_of[key], per_fire=per_fire)
            for pk, (key, per_fire) in table.inputs.items()
        ],
        batch_size=5_000,
    )
