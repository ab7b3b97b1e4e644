"""What the forecast needs of each active schedule, and how schedules are taken together in lots
(schedules.forecast.simulation): a schedule's cadence, cost limit, monthly cap and expected cost
per run. Uncapped schedules of one cadence and cost limit share a lot; a capped one has its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from schedules.forecast.cadence import Cadence
from schedules.forecast.simulation import ZERO, Lot


@dataclass(frozen=True)
class GroupKey:
    """What makes schedules interchangeable in the simulation but for their expected cost: one
    cadence, one cost limit, and no cap (`solo` 0), or the one capped schedule (`solo` its id)."""

    cadence: Cadence
    max_cost: Decimal
    monthly_cap: Decimal | None
    solo: int

    @property
    def order(self) -> tuple[int, Decimal, str, int]:
        return (self.cadence.first_minute, self.max_cost, self.cadence.key, self.solo)


@dataclass(frozen=True)
class Input:
    """One active schedule's forecast inputs: `per_fire` is its expected cost per run, the median
    cost of its last 20 completed runs (at most its `max_cost`), or `max_cost` with none."""

    schedule_id: int
    cadence: Cadence
    max_cost: Decimal
    monthly_cap: Decimal | None
    per_fire: Decimal

    @property
    def group(self) -> GroupKey:
        solo = self.schedule_id if self.monthly_cap is not None else 0
        return GroupKey(self.cadence, self.max_cost, self.monthly_cap, solo)


@dataclass(frozen=True)
class Placed:
    """Where a schedule is in the lots: the lot's index and its position among the lot's members."""

    lot: int
    position: int


def lots_of(
    inputs: Iterable[Input],
    fires: Callable[[Cadence], dict[date, int]],
    spent: Callable[[int], Decimal] = lambda schedule_id: ZERO,
) -> tuple[list[Lot], dict[int, Placed]]:
    """The lots of `inputs`, each member's cost read (`fires`: one member's fires from now by date;
    `spent`: a capped schedule's spend this month), and where each schedule is."""
    groups: dict[GroupKey, list[Input]] = {}
    for item in inputs:
        groups.setdefault(item.group, []).append(item)
    lots: list[Lot] = []
    placed: dict[int, Placed] = {}
    for key, members in groups.items():
        members.sort(key=lambda item: item.schedule_id)
        for position, item in enumerate(members):
            placed[item.schedule_id] = Placed(len(lots), position)
        lots.append(
            Lot(
                order=key.order,
                max_cost=key.max_cost,
                members=len(members),
                per_fire_sum=sum((item.per_fire for item in members), ZERO),
                fires=fires(key.cadence),
                monthly_cap=key.monthly_cap,
                spent=spent(key.solo) if key.solo else ZERO,
                costs=[item.per_fire for item in members],
            )
        )
    return lots, placed
