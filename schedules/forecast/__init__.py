"""What the owner's schedules will cost this month, within the ceilings (docs/contract.md#forecast).

Admission refuses a run that does not fit, so the month is simulated day by day in the owner's zone
(schedules.forecast.simulation): each day at most what the daily ceiling leaves, the month at most
the monthly ceiling, each schedule at most its monthly cap, each run at most its cost limit. The
forecast says what will be spent (expected: each run at its schedule's expected cost; worst: each at
its cost limit), when the monthly ceiling is reached, on how many days the daily ceiling stops runs,
and how many runs are refused or skipped, from which schedules.

Its inputs are read from the owner's ForecastGroup rows (a few, kept current by
schedules.forecast.table), not from their schedules: an owner with 10,000 schedules has a few
dozen groups. The budget page, a schedule's page, the proposal card and the API all read this
module, so they say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

from django.db import connection
from django.utils import timezone

from accounting import ledger
from accounting.ledger import ZERO, month_bounds
from accounting.models import OwnerBudget
from accounting.selectors import cost_this_month, owner_timezone
from accounting.timezones import owner_zone
from schedules.forecast.cadence import Cadence, MonthFires
from schedules.forecast.inputs import GroupKey
from schedules.forecast.simulation import CostsNeeded, Lot, LotRun, MonthRun, Share, simulate
from schedules.forecast.table import cadence_of, fires_of, key_of
from schedules.models import ForecastGroup, ForecastInput, Schedule

SHOWN = 25  # schedules in the budget page's table
STOPPED_SHOWN = 5  # schedules named as the ones whose runs are refused or skipped


@dataclass(frozen=True)
class Runs:
    """Runs from now to the month's end: due (the schedule's fires), admitted, refused by a
    ceiling, skipped at a monthly cap."""

    due: int = 0
    run: int = 0
    refused: int = 0
    skipped: int = 0

    @property
    def stopped(self) -> int:
        return self.refused + self.skipped


@dataclass(frozen=True)
class Forecast:
    """One schedule's month: spent so far; expected and worst at the month's end within the ceilings
    and its cap; its expected cost per run and its cost limit; its runs from now in both cases."""

    spent: Decimal
    expected: Decimal
    worst: Decimal
    monthly_cap: Decimal | None
    per_fire: Decimal
    max_cost: Decimal
    runs: Runs = Runs()
    worst_runs: Runs = Runs()

    @property
    def remaining_fires(self) -> int:
        return self.runs.due

    @property
    def cap_used(self) -> int | None:
        """Percent of the cap spent (for a bar); None without a cap."""
        if not self.monthly_cap:
            return None
        return min(100, int(self.spent * 100 / self.monthly_cap))


class Named(NamedTuple):
    """A schedule as the forecast names it."""

    pk: int
    title: str


@dataclass(frozen=True)
class Stopped:
    """A schedule whose runs the ceilings refuse or its cap skips (expected case)."""

    schedule: Named
    refused: int
    skipped: int


@dataclass(frozen=True)
class Extra:
    """A schedule not yet created (a proposal): its cadence and the cost limit the policy pins. With
    no completed run yet, each of its runs is expected to cost its cost limit."""

    cadence: Cadence
    max_cost: Decimal


@dataclass(frozen=True)
class MonthForecast:
    """The owner's month: spent so far, expected and worst at its end within the ceilings, the dates
    the monthly ceiling is reached (None: not this month), the days left (today included) and on how
    many the daily ceiling stops runs, the runs in both cases, and (`named`) the schedules whose runs
    are refused or skipped, (`table`) the SHOWN schedules expected to spend most from now, (`extra`)
    the proposed schedule's own forecast within this month."""

    spent: Decimal
    expected: Decimal
    worst: Decimal
    ceiling: Decimal
    daily_ceiling: Decimal
    ceiling_reached_on: date | None
    worst_reached_on: date | None
    days_left: int
    daily_days: int
    worst_daily_days: int
    runs: Runs
    worst_runs: Runs
    active: int  # schedules with runs left (active; a one-time one until it fires), `extra` too
    stopped: list[Stopped] = field(default_factory=list)
    stopped_count: int = 0  # schedules with runs refused or skipped
    largest: list[tuple[Named, Forecast]] = field(default_factory=list)
    extra: Forecast | None = None

    @property
    def coming(self) -> Decimal:
        """What the active schedules are expected to spend from now to the month's end."""
        return self.expected - self.spent

    @property
    def worst_extra(self) -> Decimal:
        return self.worst - self.expected

    @property
    def not_shown(self) -> int:
        return max(0, self.active - len(self.largest))

    @property
    def schedules(self) -> bool:
        return self.active > 0

    @property
    def stopped_more(self) -> int:
        """Schedules with runs refused or skipped beyond those named."""
        return max(0, self.stopped_count - len(self.stopped))

    def share(self, amount: Decimal) -> int:
        """`amount` as a percentage of the ceiling, for the bar (at most 100)."""
        return min(100, int(amount * 100 / self.ceiling)) if self.ceiling > 0 else 100


@dataclass(frozen=True)
class Name:
    """A member of a group, named: its schedule's id, expected cost per run, title, and position in
    the group (None: not read, the group runs every run)."""

    pk: int
    cost: Decimal
    title: str
    position: int | None


@dataclass
class _Members:
    """A group's members in member order (ids, expected costs per run, titles), read when a ceiling
    cuts into the group."""

    ids: list[int]
    costs: list[Decimal]
    titles: list[str]


class OwnerMonth:
    """One owner's month as read once (their budget, their forecast groups, the spend of capped
    schedules) and simulated as often as a page needs: as it is, with a proposed schedule, for one
    schedule. Two to four queries in all."""

    def __init__(
        self,
        owner_id: int,
        *,
        now: datetime | None = None,
        budget: OwnerBudget | None = None,
        summary: ledger.BudgetSummary | None = None,
        spent_of: list[int] | None = None,
    ) -> None:
        """`spent_of`: schedules whose spend this month is read with the capped ones' (one query)."""
        self.owner_id = owner_id
        self.now = now or timezone.now()
        budget = budget or ledger.budget_row(owner_id)
        self.summary = summary or ledger.summarize(owner_id, now=self.now, budget=budget)
        self.zone_name = owner_timezone(budget)
        zone = owner_zone(self.zone_name)
        self.today = self.now.astimezone(zone).date()
        _, end = month_bounds(self.today, zone)
        self.days = [self.today + timedelta(days=i) for i in range((end.date() - self.today).days)]
        self.groups = list(ForecastGroup.objects.filter(owner_id=owner_id).order_by("pk"))
        wanted = {g.solo for g in self.groups if g.solo} | set(spent_of or [])
        self.spent = {pk: ZERO for pk in wanted}
        if wanted:
            self.spent.update(cost_this_month(owner_id, wanted, self.zone_name, now=self.now))
        first = self.today.replace(day=1)
        month_days = [first + timedelta(days=i) for i in range((end.date() - first).days)]
        self.fires = [self._fires(g).left(self.now, month_days) for g in self.groups]
        self.members: dict[int, _Members] | None = None
        self._runs: dict[tuple[Extra | None, bool], tuple[MonthRun, list[Lot], int | None]] = {}

    def _fires(self, group: ForecastGroup) -> MonthFires:
        if group.day == self.today and group.owner_timezone == self.zone_name:
            return MonthFires(group.day.replace(day=1), tuple(group.fires), group.day, tuple(group.today))
        # The tick has not moved this owner on to today yet (a minute after midnight at most).
        return fires_of(cadence_of(group), day=self.today, zone_name=self.zone_name)

    # -- simulating -------------------------------------------------------------------------------

    def _lots(self, extra: Extra | None) -> tuple[list[Lot], int | None]:
        """The lots, and the index of the lot `extra` joins (as its last member) if given."""
        joins = None
        if extra is not None:
            wanted = GroupKey(extra.cadence, extra.max_cost, None, 0)
            joins = next((i for i, g in enumerate(self.groups) if key_of(g) == wanted), None)
        lots = []
        for index, group in enumerate(self.groups):
            members = group.members
            total = group.per_fire_sum
            costs: list[Decimal] | None = [total] if members == 1 else None
            if self.members is not None and group.pk in self.members:
                costs = list(self.members[group.pk].costs)
            if index == joins and extra is not None:
                members, total = members + 1, total + extra.max_cost
                costs = None if costs is None else [*costs, extra.max_cost]
            lots.append(
                Lot(
                    order=(group.first_minute, group.max_cost, cadence_of(group).key, group.solo),
                    max_cost=group.max_cost,
                    members=members,
                    per_fire_sum=total,
                    fires=self.fires[index],
                    monthly_cap=group.monthly_cap,
                    spent=self.spent.get(group.solo, ZERO) if group.solo else ZERO,
                    costs=costs,
                )
            )
        if extra is not None and joins is None:
            joins = len(lots)
            fires = fires_of(extra.cadence, day=self.today, zone_name=self.zone_name).left(self.now)
            order = (_first_minute(extra.cadence), extra.max_cost, extra.cadence.key, 0)
            lots.append(Lot(order, extra.max_cost, 1, extra.max_cost, fires, costs=[extra.max_cost]))
        return lots, joins

    def run(
        self, extra: Extra | None = None, *, worst: bool = False
    ) -> tuple[MonthRun, list[Lot], int | None]:
        """The month simulated (with `extra`), its lots, and the lot `extra` is in."""
        key = (extra, worst)
        if key not in self._runs:
            while True:
                lots, joins = self._lots(extra)
                try:
                    found = simulate(
                        lots,
                        days=self.days,
                        spent_today=self.summary.spent_today,
                        spent_month=self.summary.spent_month,
                        daily=self.summary.daily_ceiling,
                        monthly=self.summary.monthly_ceiling,
                        worst=worst,
                    )
                except CostsNeeded:
                    if self.members is not None:
                        raise
                    self._read_members()
                    continue
                self._runs[key] = (found, lots, joins)
                break
        return self._runs[key]

    def _read_members(self) -> None:
        """Every shared group's members in member order, with their costs and titles (one query);
        needed only when a ceiling cuts into a group of several schedules."""
        several = [g.pk for g in self.groups if g.members > 1]
        self.members = {pk: _Members([], [], []) for pk in several}
        rows = (
            ForecastInput.objects.filter(group_id__in=several)
            .order_by("group_id", "schedule_id")
            .values_list("group_id", "schedule_id", "per_fire", "schedule__title")
        )
        for group_id, schedule_id, per_fire, title in rows:
            members = self.members[group_id]
            members.ids.append(schedule_id)
            members.costs.append(per_fire)
            members.titles.append(title)

    # -- the month ----------------------------------------------------------------------------------

    def month(self, *, extra: Extra | None = None, named: bool = False, table: bool = False) -> MonthForecast:
        """The month (with `extra`); `named`: the schedules whose runs are stopped, by name; `table`:
        the SHOWN schedules expected to spend most from now (two more queries)."""
        found, lots, joins = self.run(extra)
        worst, _, _ = self.run(extra, worst=True)
        spent = self.summary.spent_month
        stopped: list[Stopped] = []
        count = 0
        largest: list[tuple[Named, Forecast]] = []
        if named or table:
            names = self._names(found, lots, shown=SHOWN if table else 0)
            stopped, count = self._stopped(found, lots, names) if named else ([], 0)
            largest = self._largest(found, worst, lots, names) if table else []
        return MonthForecast(
            spent=spent,
            expected=spent + found.spend,
            worst=spent + worst.spend,
            ceiling=self.summary.monthly_ceiling,
            daily_ceiling=self.summary.daily_ceiling,
            ceiling_reached_on=found.reached_on,
            worst_reached_on=worst.reached_on,
            days_left=len(self.days),
            daily_days=len(found.daily_days),
            worst_daily_days=len(worst.daily_days),
            runs=Runs(found.due, found.runs, found.refused, found.skipped),
            worst_runs=Runs(worst.due, worst.runs, worst.refused, worst.skipped),
            active=sum(g.members for g in self.groups) + (1 if extra is not None else 0),
            stopped=stopped,
            stopped_count=count,
            largest=largest,
            extra=self._extra(extra, lots, joins) if extra is not None else None,
        )

    def _extra(self, extra: Extra, lots: list[Lot], joins: int | None) -> Forecast:
        assert joins is not None
        found, _, _ = self.run(extra)
        worst, _, _ = self.run(extra, worst=True)
        lot = lots[joins]
        position = lot.members - 1
        expected = found.lots[joins].member(lot, position, extra.max_cost)
        at_worst = worst.lots[joins].member(lot, position, extra.max_cost)
        return Forecast(
            spent=ZERO,
            expected=expected.spend,
            worst=at_worst.spend,
            monthly_cap=None,
            per_fire=extra.max_cost,
            max_cost=extra.max_cost,
            runs=_runs_of(expected),
            worst_runs=_runs_of(at_worst),
        )

    # -- naming schedules ---------------------------------------------------------------------------

    def _names(self, found: MonthRun, lots: list[Lot], *, shown: int) -> dict[int, list[Name]]:
        """Members to name, by lot index: (schedule id, cost per run, title, position). A lot whose
        members were read (a ceiling cut into it) names them all, in member order; a lot of one
        schedule names it (for the table, or when its runs are stopped); of the other lots, which run
        every run, the `shown` dearest across them all are named, ranked in the database (their
        position does not matter). One query, none when there is nothing to name."""
        names: dict[int, list[Name]] = {}
        dearest: list[tuple[int, int, int]] = []  # group id, lot index, one member's runs due
        single: list[tuple[int, int]] = []  # group id, lot index
        for index, group in enumerate(self.groups):
            run = found.lots[index]
            if self.members is not None and group.pk in self.members:
                members = self.members[group.pk]
                names[index] = [
                    Name(pk, cost, title, position)
                    for position, (pk, cost, title) in enumerate(
                        zip(members.ids, members.costs, members.titles, strict=True)
                    )
                ]
            elif group.members == 1:
                if shown or run.refused or run.skipped:
                    single.append((group.pk, index))
            elif shown:
                dearest.append((group.pk, index, sum(lots[index].fires.values())))
        if not (dearest or single):
            return names
        inputs, schedules = ForecastInput._meta.db_table, Schedule._meta.db_table
        sql = f"""
            (SELECT r.idx, r.schedule_id, r.per_fire, s.title, NULL::integer FROM (
                SELECT g.idx, i.schedule_id, i.per_fire
                FROM unnest(%s::bigint[], %s::integer[], %s::integer[]) AS g(id, idx, due)
                CROSS JOIN LATERAL (
                    SELECT schedule_id, per_fire FROM "{inputs}" WHERE group_id = g.id
                    ORDER BY per_fire DESC, schedule_id LIMIT %s
                ) AS i
                ORDER BY i.per_fire * g.due DESC, i.schedule_id LIMIT %s
             ) AS r JOIN "{schedules}" s ON s.id = r.schedule_id)
            UNION ALL
            (SELECT g.idx, i.schedule_id, i.per_fire, s.title, 0
             FROM unnest(%s::bigint[], %s::integer[]) AS g(id, idx)
             CROSS JOIN LATERAL (
                 SELECT schedule_id, per_fire FROM "{inputs}" WHERE group_id = g.id LIMIT 1
             ) AS i
             JOIN "{schedules}" s ON s.id = i.schedule_id)"""  # noqa: S608 - model metadata
        params: list[Any] = [
            [d[0] for d in dearest],
            [d[1] for d in dearest],
            [d[2] for d in dearest],
            shown,
            shown,
            [s[0] for s in single],
            [s[1] for s in single],
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for index, schedule_id, per_fire, title, position in cursor.fetchall():
                names.setdefault(index, []).append(Name(schedule_id, per_fire, title, position))
        return names

    def _stopped(
        self,
        found: MonthRun,
        lots: list[Lot],
        names: dict[int, list[Name]],
    ) -> tuple[list[Stopped], int]:
        """The STOPPED_SHOWN schedules with the most runs refused or skipped, and how many have any.
        In a group a ceiling cuts into, its last members in member order are stopped first; a
        proposed schedule is counted, not named."""
        candidates: list[Stopped] = []
        count = 0
        for index, lot in enumerate(lots):
            run = found.lots[index]
            if not (run.refused or run.skipped):
                continue
            count += _stopped_members(run, lot)
            named = names.get(index, [])
            if len(named) == 1 and named[0].position == 0:  # a group of one (a proposal may join it)
                share = run.member(lot, 0, named[0].cost)
                if share.refused or share.skipped:
                    candidates.append(
                        Stopped(Named(named[0].pk, named[0].title), share.refused, share.skipped)
                    )
                continue
            for position in range(lot.members - 1, max(lot.members - 1 - STOPPED_SHOWN, -1), -1):
                if position < len(named):  # (a proposed schedule is the last member, with no name)
                    name = named[position]
                    share = run.member(lot, position, name.cost)
                    if share.refused:
                        candidates.append(Stopped(Named(name.pk, name.title), share.refused, 0))
        candidates.sort(key=lambda s: (-(s.refused + s.skipped), s.schedule.title, s.schedule.pk))
        return candidates[:STOPPED_SHOWN], count

    def _largest(
        self,
        found: MonthRun,
        worst: MonthRun,
        lots: list[Lot],
        names: dict[int, list[Name]],
    ) -> list[tuple[Named, Forecast]]:
        """The SHOWN schedules expected to spend most from now, each with its forecast. Their spend
        so far is read for them alone (one query), and their places in their groups only when a
        ceiling cuts into a group whose members were not read in order (the worst case's)."""
        picked: list[tuple[Decimal, str, int, int, int | None, Decimal]] = []
        for index in range(len(self.groups)):
            lot, run = lots[index], found.lots[index]
            for name in names.get(index, []):
                if name.position is None:  # every run of the group runs: what it spends is plain
                    spend = name.cost * sum(lot.fires.values())
                else:
                    spend = run.member(lot, name.position, name.cost).spend
                picked.append((-spend, name.title, name.pk, index, name.position, name.cost))
        chosen = sorted(picked)[:SHOWN]
        ids = [schedule_id for _, _, schedule_id, _, _, _ in chosen]
        missing = [i for i in ids if i not in self.spent]
        spent = {**self.spent, **cost_this_month(self.owner_id, missing, self.zone_name, now=self.now)}
        unplaced = [
            schedule_id
            for _, _, schedule_id, index, position, _ in chosen
            if position is None and _cut_partly(worst.lots[index], lots[index])
        ]
        places = {pk: place[2] for pk, place in _places(unplaced).items()}
        return [
            (
                Named(schedule_id, title),
                self._forecast(
                    lots[index],
                    index,
                    position if position is not None else places.get(schedule_id, 0),
                    cost,
                    spent.get(schedule_id, ZERO),
                    found,
                    worst,
                ),
            )
            for _, title, schedule_id, index, position, cost in chosen
        ]

    def _forecast(
        self,
        lot: Lot,
        index: int,
        position: int,
        cost: Decimal,
        spent: Decimal,
        found: MonthRun,
        worst: MonthRun,
    ) -> Forecast:
        expected = found.lots[index].member(lot, position, cost)
        at_worst = worst.lots[index].member(lot, position, lot.max_cost)
        return Forecast(
            spent=spent,
            expected=spent + expected.spend,
            worst=spent + at_worst.spend,
            monthly_cap=lot.monthly_cap,
            per_fire=cost,
            max_cost=lot.max_cost,
            runs=_runs_of(expected),
            worst_runs=_runs_of(at_worst),
        )

    # -- one schedule ---------------------------------------------------------------------------------

    def schedule(self, schedule: Schedule) -> Forecast:
        """One schedule's month within the owner's (one more query: its place in its group)."""
        spent = self.spent.get(schedule.pk)
        if spent is None:
            spent = cost_this_month(self.owner_id, [schedule.pk], self.zone_name, now=self.now).get(
                schedule.pk, ZERO
            )
        revision = schedule.current_revision
        cap = revision.monthly_cap if revision is not None else None
        max_cost = revision.run_limits.max_cost if revision is not None else ZERO
        place = _places([schedule.pk]).get(schedule.pk)
        if place is None:  # not active: nothing more this month
            return Forecast(spent, spent, spent, cap, max_cost, max_cost)
        group_id, per_fire, position = place
        index = next((i for i, g in enumerate(self.groups) if g.pk == group_id), None)
        if index is None:  # written since this month was read
            return Forecast(spent, spent, spent, cap, per_fire, max_cost)
        found, lots, _ = self.run()
        worst, _, _ = self.run(worst=True)
        return self._forecast(lots[index], index, position, per_fire, spent, found, worst)


def _places(schedule_ids: list[int]) -> dict[int, tuple[int, Decimal, int]]:
    """Each active schedule's group, expected cost per run and position among the group's members
    (one query; none for no schedule)."""
    if not schedule_ids:
        return {}
    table = ForecastInput._meta.db_table
    sql = f"""
        SELECT i.schedule_id, i.group_id, i.per_fire, (
            SELECT count(*) FROM "{table}" j WHERE j.group_id = i.group_id AND j.schedule_id < i.schedule_id
        ) FROM "{table}" i WHERE i.schedule_id = ANY(%s)"""  # noqa: S608 - model metadata
    with connection.cursor() as cursor:
        cursor.execute(sql, [schedule_ids])
        return {int(pk): (int(group), cost, int(position)) for pk, group, cost, position in cursor.fetchall()}


def _runs_of(share: Share) -> Runs:
    return Runs(share.due, share.runs, share.refused, share.skipped)


def _cut_partly(run: LotRun, lot: Lot) -> bool:
    """Whether a ceiling cut into the lot's runs of a day after some were admitted: only then does a
    member's share depend on its position (a day refused whole refuses every member alike)."""
    return any(0 < admitted < lot.members * lot.fires.get(day, 0) for day, admitted in run.admitted.items())


def _stopped_members(run: LotRun, lot: Lot) -> int:
    """How many of a lot's members have a run refused or skipped: member j has one on a day with
    `fires` each when fewer than (j + 1) x fires of the lot's runs were admitted that day."""
    if lot.members == 1:
        return 1
    first = lot.members
    for day, fires in lot.fires.items():
        if fires and day not in run.whole:
            first = min(first, run.admitted.get(day, 0) // fires)
    return lot.members - first


def _first_minute(cadence: Cadence) -> int:
    try:
        return cadence.first_minute
    except ValueError:
        return 0


def month_forecast(
    owner_id: int,
    *,
    now: datetime | None = None,
    budget: OwnerBudget | None = None,
    summary: ledger.BudgetSummary | None = None,
    named: bool = True,
    table: bool = False,
) -> MonthForecast:
    """The owner's month as it stands (a page passes the `budget` and `summary` it already read)."""
    return OwnerMonth(owner_id, now=now, budget=budget, summary=summary).month(named=named, table=table)


def schedule_forecast(
    schedule: Schedule,
    *,
    now: datetime | None = None,
    budget: OwnerBudget | None = None,
    summary: ledger.BudgetSummary | None = None,
) -> Forecast:
    """One schedule's month, within the owner's (the same simulation as the budget page's)."""
    if schedule.status != Schedule.Status.ACTIVE:  # nothing more this month: its spend alone
        budget = budget or ledger.budget_row(schedule.owner_id)
        zone_name = owner_timezone(budget)
        spent = cost_this_month(schedule.owner_id, [schedule.pk], zone_name, now=now).get(schedule.pk, ZERO)
        revision = schedule.current_revision
        cap = revision.monthly_cap if revision is not None else None
        max_cost = revision.run_limits.max_cost if revision is not None else ZERO
        return Forecast(spent, spent, spent, cap, max_cost, max_cost)
    month = OwnerMonth(schedule.owner_id, now=now, budget=budget, summary=summary, spent_of=[schedule.pk])
    return month.schedule(schedule)
