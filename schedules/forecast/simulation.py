"""The owner's month simulated day by day within the ceilings (docs/contract.md#forecast).

Admission refuses a run that does not fit, so a forecast that adds up every remaining fire tells the
owner of money that can never be spent. The month is played forward instead, one owner-local day
at a time, as the tick and admission would play it:

- Each fire of a schedule is a run whose cost limit (`max_cost`) is reserved against the ceilings
  while it runs. The simulation takes runs one after another: a run is admitted only if the day's
  spend + its `max_cost` fits under the daily ceiling and the month's spend + its `max_cost` under
  the monthly ceiling (as admission judges spend + open reservations + the new reservation); once
  admitted it spends its expected cost (in the worst case, its whole `max_cost`) and its
  reservation is released before the next run. Runs in flight together would hold more at once;
  the forecast does not guess at overlaps.
- A capped schedule's fire is skipped first (the tick's rule) when its spend this month + its
  `max_cost` would be strictly above its `monthly_cap`; a skipped fire is not refused and spends
  nothing.
- A refused run spends nothing and its reason is the first ceiling that does not fit, daily before
  monthly, as admission words it.
- Within a day the schedules are taken one after another, each with all its runs of that day, in
  the order of the time of day of their first run (in their own zone), ties in a fixed order (cost
  limit, cadence, uncapped before capped, then creation). A schedule firing every two minutes from
  midnight thus uses the day's ceiling before the 09:00 briefing, as it would.

The schedules are taken in *lots*: uncapped schedules of one cadence and one cost limit are
interchangeable but for their expected cost per run, so a lot is simulated at once (a closed form
per lot and day), and only a lot the ceilings cut into needs each member's cost, in member (id)
order. A capped schedule is a lot of its own: its cap depends on its own spend. The spend that
admission would let through is a prefix of each lot's runs of a day, so a member's share follows
from its position (`LotRun.member`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

ZERO = Decimal(0)


@dataclass
class Lot:
    """Schedules the simulation takes together. `order` places the lot within a day (see the module
    docstring); `fires` are one member's fires per owner-local day from now on; `per_fire_sum` is the
    sum of the members' expected costs per run; `costs` each member's, in member order, when read
    (needed only when a ceiling cuts into a lot of several members)."""

    order: tuple[int, Decimal, str, int]
    max_cost: Decimal
    members: int
    per_fire_sum: Decimal
    fires: dict[date, int]
    monthly_cap: Decimal | None = None
    spent: Decimal = ZERO  # a capped schedule's spend this month before now
    costs: list[Decimal] | None = None


class CostsNeeded(Exception):
    """A ceiling cuts into a lot of several members whose costs were not read: read them, run again."""

    def __init__(self, lot: Lot) -> None:
        super().__init__("the members' costs of a lot are needed")
        self.lot = lot


@dataclass
class LotRun:
    """What one lot does in the month: the runs it admits (every one on a day in `whole`, the days
    no ceiling or cap cut into; `admitted` on the others, with what they spend, `cut_spend`), its runs
    refused by a ceiling and skipped at the monthly cap. Its totals are worked out when asked: a page
    asks for a few lots' only."""

    lot: Lot
    whole: set[date]
    worst: bool
    admitted: dict[date, int] = field(default_factory=dict)
    cut_spend: Decimal = ZERO
    refused: int = 0
    skipped: int = 0

    @property
    def runs(self) -> int:
        lot = self.lot
        return sum(lot.members * f for d, f in lot.fires.items() if d in self.whole) + sum(
            self.admitted.values()
        )

    @property
    def spend(self) -> Decimal:
        lot = self.lot
        per_fire = lot.max_cost * lot.members if self.worst else lot.per_fire_sum
        return per_fire * sum(f for d, f in lot.fires.items() if d in self.whole) + self.cut_spend

    def member(self, lot: Lot, position: int, cost: Decimal) -> Share:
        """The share of the member at `position` (0-based, member order) whose expected cost per run
        is `cost` (the worst case passes `max_cost`)."""
        if lot.members == 1:
            return Share(sum(lot.fires.values()), self.runs, self.spend, self.refused, self.skipped)
        if not self.admitted:  # every day whole: each member runs every run
            due = sum(lot.fires.values())
            return Share(due, due, due * cost, 0, 0)
        due = runs = 0
        for day, fires in lot.fires.items():
            due += fires
            admitted = lot.members * fires if day in self.whole else self.admitted.get(day, 0)
            runs += min(max(admitted - position * fires, 0), fires)
        return Share(due, runs, runs * cost, due - runs, 0)


@dataclass(frozen=True)
class Share:
    """One schedule's part of the month from now: runs due, admitted, what they spend, refused,
    skipped."""

    due: int
    runs: int
    spend: Decimal
    refused: int
    skipped: int


@dataclass
class MonthRun:
    """The simulated rest of the month: the runs due, what it adds to the month's spend, the runs
    admitted, refused and skipped, the days on which the daily ceiling refuses a run, and the date
    the monthly ceiling is reached (the day of the last run admitted before it first refuses one; the
    first day if it is reached already), or None."""

    lots: list[LotRun]
    due: int = 0
    spend: Decimal = ZERO
    runs: int = 0
    refused: int = 0
    skipped: int = 0
    daily_days: list[date] = field(default_factory=list)
    reached_on: date | None = None
    by_day: dict[date, Decimal] = field(default_factory=dict)  # what is spent on each day from now


def simulate(
    lots: Sequence[Lot],
    *,
    days: Sequence[date],
    spent_today: Decimal,
    spent_month: Decimal,
    daily: Decimal,
    monthly: Decimal,
    worst: bool = False,
) -> MonthRun:
    """Play `days` (owner-local, from today to the month's end) forward; `worst`: every run spends its
    whole `max_cost`. Raises CostsNeeded when a ceiling cuts into a lot whose costs were not read.

    A day on which every lot's runs fit at once (the day's demand + the largest cost limit under
    both ceilings, each capped lot's within its cap) is taken whole, without going lot by lot: an
    owner whose ceilings are far away costs one pass over their lots' fires."""
    whole: set[date] = set()
    result = MonthRun([LotRun(lot, whole, worst) for lot in lots])
    demand: dict[date, Decimal] = {}
    due: dict[date, int] = {}
    largest: dict[date, Decimal] = {}
    smallest: dict[date, Decimal] = {}
    capped = [i for i, lot in enumerate(lots) if lot.monthly_cap is not None]
    for lot in lots:
        per_fire = lot.max_cost * lot.members if worst else lot.per_fire_sum
        limit = lot.max_cost
        for day, fires in lot.fires.items():
            if fires:
                demand[day] = demand.get(day, ZERO) + per_fire * fires
                due[day] = due.get(day, 0) + lot.members * fires
                if limit > largest.get(day, ZERO):
                    largest[day] = limit
                if day not in smallest or limit < smallest[day]:
                    smallest[day] = limit
    ordered = sorted(range(len(lots)), key=lambda i: lots[i].order)
    own = [lot.spent for lot in lots]
    month = spent_month
    if days and month >= monthly:
        result.reached_on = days[0]
    last_admitted: date | None = None
    for index, day in enumerate(days):
        today = spent_today if index == 0 else ZERO
        if day not in due:
            continue
        needed = demand[day] + largest[day]
        if (
            today + needed <= daily
            and month + needed <= monthly
            and all(_fits_whole(lots[i], day, own[i], worst) for i in capped)
        ):
            whole.add(day)
            for i in capped:
                own[i] += _per_fire(lots[i], worst) * lots[i].fires.get(day, 0)
            month += demand[day]
            result.runs += due[day]
            result.spend += demand[day]
            if demand[day]:
                result.by_day[day] = demand[day]
            last_admitted = day
            continue
        if not capped and (today + smallest[day] > daily or month + smallest[day] > monthly):
            # No run of the day fits under a ceiling: every one is refused, for the daily ceiling
            # if its cost limit does not fit under it, else for the monthly one.
            for i, lot in enumerate(lots):
                fires = lot.fires.get(day, 0)
                if fires:
                    result.lots[i].admitted[day] = 0
                    result.lots[i].refused += lot.members * fires
            result.refused += due[day]
            if today + largest[day] > daily:
                result.daily_days.append(day)
            if today + smallest[day] <= daily and result.reached_on is None:
                result.reached_on = last_admitted or days[0]
            continue
        for i in ordered:
            lot = lots[i]
            fires = lot.fires.get(day, 0)
            if not fires:
                continue
            runs, spend = _admit(lot, fires, today, month, own[i], daily, monthly, worst)
            run = result.lots[i]
            run.admitted[day] = runs
            if runs:
                last_admitted = day
            run.cut_spend += spend
            result.runs += runs
            result.spend += spend
            if spend:
                result.by_day[day] = result.by_day.get(day, ZERO) + spend
            today += spend
            month += spend
            own[i] += spend
            stopped = lot.members * fires - runs
            if not stopped:
                continue
            limit = lot.max_cost
            if lot.monthly_cap is not None and own[i] + limit > lot.monthly_cap:
                run.skipped += stopped
                result.skipped += stopped
            else:
                run.refused += stopped
                result.refused += stopped
                if today + limit > daily:
                    if not result.daily_days or result.daily_days[-1] != day:
                        result.daily_days.append(day)
                elif result.reached_on is None:
                    result.reached_on = last_admitted or days[0]
    result.due = sum(due.get(day, 0) for day in days)
    return result


def _per_fire(lot: Lot, worst: bool) -> Decimal:
    return lot.max_cost * lot.members if worst else lot.per_fire_sum


def _fits_whole(lot: Lot, day: date, own: Decimal, worst: bool) -> bool:
    """Whether every run of a capped lot (one schedule) on `day` fits within its cap."""
    return own + _per_fire(lot, worst) * lot.fires.get(day, 0) + lot.max_cost <= (lot.monthly_cap or ZERO)


def _fit(room: Decimal, cost: Decimal, most: int) -> int:
    """How many runs of `cost` are admitted, one after another, while what they spent stays within
    `room` (the limit less the day's or month's spend less one run's `max_cost`), at most `most`."""
    if room < 0:
        return 0
    if cost <= 0:
        return most
    return min(most, int(room // cost) + 1)


def _admit(
    lot: Lot,
    fires: int,
    today: Decimal,
    month: Decimal,
    own: Decimal,
    daily: Decimal,
    monthly: Decimal,
    worst: bool,
) -> tuple[int, Decimal]:
    """The runs of `lot` admitted on one day (each member's `fires` in member order) and their spend."""
    limit = lot.max_cost
    rooms = [daily - limit - today, monthly - limit - month]
    if lot.monthly_cap is not None:
        rooms.append(lot.monthly_cap - limit - own)
    due = lot.members * fires
    if worst or lot.members == 1:
        cost = limit if worst else lot.per_fire_sum
        runs = min(_fit(room, cost, due) for room in rooms)
        return runs, runs * cost
    everything = fires * lot.per_fire_sum
    if all(room >= everything for room in rooms):
        return due, everything
    if lot.costs is None:
        raise CostsNeeded(lot)
    runs, spend = 0, ZERO
    for cost in lot.costs:
        taken = min(_fit(room - spend, cost, fires) for room in rooms)
        runs += taken
        spend += taken * cost
        if taken < fires:
            break
    return runs, spend
