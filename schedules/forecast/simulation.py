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
    """What one lot does in the month: runs admitted per day, what they spend, runs refused by a
    ceiling and runs skipped at the monthly cap."""

    admitted: dict[date, int] = field(default_factory=dict)
    runs: int = 0
    spend: Decimal = ZERO
    refused: int = 0
    skipped: int = 0

    def member(self, lot: Lot, position: int, cost: Decimal) -> Share:
        """The share of the member at `position` (0-based, member order) whose expected cost per run
        is `cost` (the worst case passes `max_cost`)."""
        if lot.members == 1:
            return Share(sum(lot.fires.values()), self.runs, self.spend, self.refused, self.skipped)
        due = runs = 0
        for day, fires in lot.fires.items():
            due += fires
            runs += min(max(self.admitted.get(day, 0) - position * fires, 0), fires)
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
    """The simulated rest of the month: what it adds to the month's spend, the runs admitted,
    refused and skipped, the days on which the daily ceiling refuses a run, and the date the
    monthly ceiling is reached (the day of the last run admitted before it first refuses one; the
    first day if it is reached already), or None."""

    lots: list[LotRun]
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
    whole `max_cost`. Raises CostsNeeded when a ceiling cuts into a lot whose costs were not read."""
    result = MonthRun([LotRun() for _ in lots])
    ordered = sorted(range(len(lots)), key=lambda i: lots[i].order)
    own = [lot.spent for lot in lots]
    month = spent_month
    if days and month >= monthly:
        result.reached_on = days[0]
    last_admitted: date | None = None
    for index, day in enumerate(days):
        today = spent_today if index == 0 else ZERO
        for i in ordered:
            lot = lots[i]
            fires = lot.fires.get(day, 0)
            if not fires:
                continue
            due = lot.members * fires
            runs, spend = _admit(lot, fires, today, month, own[i], daily, monthly, worst)
            run = result.lots[i]
            if runs:
                run.admitted[day] = runs
                last_admitted = day
            run.runs += runs
            run.spend += spend
            if spend:
                result.by_day[day] = result.by_day.get(day, ZERO) + spend
            today += spend
            month += spend
            own[i] += spend
            if runs == due:
                continue
            stopped = due - runs
            limit = lot.max_cost
            if lot.monthly_cap is not None and own[i] + limit > lot.monthly_cap:
                run.skipped += stopped
            else:
                run.refused += stopped
                if today + limit > daily:
                    if not result.daily_days or result.daily_days[-1] != day:
                        result.daily_days.append(day)
                elif result.reached_on is None:
                    result.reached_on = last_admitted or days[0]
    for run in result.lots:
        result.spend += run.spend
        result.runs += run.runs
        result.refused += run.refused
        result.skipped += run.skipped
    return result


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
