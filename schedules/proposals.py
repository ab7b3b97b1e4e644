"""Confirm before chat creates a schedule (docs/contract.md#confirm-before-chat-creates-a-schedule).

When the assistant calls `schedule.create` in a conversation and its owner asks to confirm such
schedules (`NotificationSettings.confirm_chat_schedules`, on by default and when the owner has no
settings row yet), the tool writes a **proposal** instead of a schedule. It is checked exactly as
the creation would be (schedules.services.check_create, and the cap on active schedules read
without a lock), so an invalid one is refused as before. The owner confirms it (a button on its
card, the API, or "yes" in the conversation), and only then is the schedule created, through
schedules.services.create_schedule: path `schedule.create`, via chat, the policy's limits. Declined,
or left open for PROPOSAL_LIFETIME, it is over. Confirming twice, or twenty times at once, yields one
schedule: the proposal's row is locked for the decision.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from accounting.selectors import owner_timezone
from accounting.timezones import owner_zone
from runs.limits import RunLimits
from runs.models import Agent, Conversation, Run
from schedules import recurrence, services
from schedules.forecast import Extra, Forecast, MonthForecast, OwnerMonth
from schedules.forecast.cadence import Cadence
from schedules.models import NotificationSettings, Proposal, Schedule, ScheduleRevision
from schedules.notices.channels import settings_for
from schedules.schemas import InvalidSchedule, ScheduleCreate, parse_create

PROPOSAL_LIFETIME = timedelta(hours=24)
NEXT_FIRES = 3
# What the owner may answer to a proposal in the conversation to confirm it.
AFFIRMATIVE = re.compile(r"^(?:yes(?:,? please)?|confirm|ok(?:ay)?|do it)\s*[.!]*$", re.IGNORECASE)


class ProposalDeclined(Exception):
    """The owner declined it: it can no longer be confirmed."""

    message = "You declined this proposal, so it was not created. Ask the assistant again for a new one."


class ProposalExpired(Exception):
    """It waited PROPOSAL_LIFETIME unconfirmed (or its expiry was recorded)."""

    message = (
        "This proposal expired: it waited 24 hours without a confirmation, so nothing was created. "
        "Ask the assistant again for a new one."
    )


class ProposalConfirmed(Exception):
    """Confirmed already: its schedule exists, and declining no longer applies."""

    message = (
        "This proposal is confirmed: its schedule exists. Pause the schedule if you do not want it to run."
    )


class ProposalInvalid(Exception):
    """The definition no longer passes schedule.create's checks (its time has passed, its agent was
    retired, ...): nothing was created, and the proposal stays as it was."""

    def __init__(self, error: InvalidSchedule) -> None:
        self.fields = error.fields
        self.message = f"It cannot be created as proposed any more: {error}. Ask the assistant again."
        super().__init__(self.message)


# -- the owner's setting --------------------------------------------------------------------------


def confirmation_on(owner_id: int) -> bool:
    """Whether schedules the assistant proposes wait for the owner (no settings row yet: on)."""
    value = (
        NotificationSettings.objects.filter(owner_id=owner_id)
        .values_list("confirm_chat_schedules", flat=True)
        .first()
    )
    return True if value is None else bool(value)


def set_confirmation(owner: AbstractBaseUser, on: bool) -> NotificationSettings:
    """The owner's choice: ask before a chat schedule is created (on), or create at once. Idempotent."""
    assert owner.pk is not None
    channels = settings_for(int(owner.pk))
    NotificationSettings.objects.filter(pk=channels.pk).update(
        confirm_chat_schedules=on, updated_at=timezone.now()
    )
    channels.refresh_from_db()
    return channels


# -- transitions ----------------------------------------------------------------------------------


def _stored(data: ScheduleCreate, checked: services.CheckedCreate) -> dict[str, Any]:
    """The definition as it will be created: the time zone is fixed now, as the card shows it."""
    stored: dict[str, Any] = data.model_dump(mode="json", exclude={"agent"}, exclude_none=True)
    stored["timezone"] = checked.timezone
    return stored


def propose(run: Run, arguments: dict[str, Any], *, now: datetime | None = None) -> Proposal:
    """A proposal for the schedule.create `arguments` a tool call of `run` gave, checked as the
    creation would be (raises InvalidSchedule or ScheduleLimit as it does); open for 24 hours."""
    now = now or timezone.now()
    agent = Agent.objects.get(pk=run.agent_id)
    data = parse_create({**arguments, "agent": agent.name})
    checked = services.check_create(run.owner_id, data, via=services.CHAT, now=now)
    services.check_room(run.owner_id, lock=False)
    assert run.conversation_id is not None
    return Proposal.objects.create(
        owner_id=run.owner_id,
        conversation_id=run.conversation_id,
        run_id=run.pk,
        agent=checked.agent,
        arguments=_stored(data, checked),
        status=Proposal.Status.OPEN,
        created_at=now,
        expires_at=now + PROPOSAL_LIFETIME,
    )


def status_of(proposal: Proposal, now: datetime) -> str:
    """Its status as the owner reads it: an open proposal past its expiry is expired, recorded or not."""
    if proposal.status == Proposal.Status.OPEN and proposal.expires_at <= now:
        return Proposal.Status.EXPIRED
    return str(proposal.status)


def _locked(proposal_id: int, owner: AbstractBaseUser) -> Proposal:
    """The owner's proposal, its row locked for this transaction; another's is DoesNotExist."""
    found = Proposal.objects.select_for_update().filter(pk=proposal_id, owner_id=owner.pk).first()
    if found is None:
        raise Proposal.DoesNotExist(proposal_id)
    return found


def _expire(proposal: Proposal) -> None:
    Proposal.objects.filter(pk=proposal.pk, status=Proposal.Status.OPEN).update(
        status=Proposal.Status.EXPIRED
    )


Decided = TypeVar("Decided")


def _decide(
    proposal_id: int, owner: AbstractBaseUser, now: datetime, step: Callable[[Proposal, str], Decided]
) -> Decided:
    """`step(proposal, status)` under the owner's proposal's row lock, in one transaction, unless it
    has expired: then the expiry is recorded (committed before the refusal) and ProposalExpired raised."""
    with transaction.atomic():
        proposal = _locked(proposal_id, owner)
        status = status_of(proposal, now)
        if status != Proposal.Status.EXPIRED:
            return step(proposal, status)
        _expire(proposal)
    raise ProposalExpired(proposal)


def confirm(
    proposal_id: int, owner: AbstractBaseUser, *, now: datetime | None = None
) -> tuple[Schedule, bool]:
    """Create the proposed schedule (schedule.create via chat, §5's policy) and record it on the
    proposal, in one transaction under the proposal's row lock: (schedule, True). Idempotent:
    confirmed already gives (its schedule, False). Raises Proposal.DoesNotExist (not the owner's),
    ProposalDeclined, ProposalExpired (recording the expiry), ProposalInvalid or ScheduleLimit, and
    Schedule.DoesNotExist when the schedule it created was deleted since."""
    now = now or timezone.now()

    def create(proposal: Proposal, status: str) -> tuple[Schedule, bool]:
        if status == Proposal.Status.DECLINED:
            raise ProposalDeclined(proposal)
        if status == Proposal.Status.CONFIRMED:
            if proposal.schedule_id is None:  # its schedule was deleted since
                raise Schedule.DoesNotExist(proposal.pk)
            return Schedule.objects.get(pk=proposal.schedule_id), False
        try:
            data = parse_create({**proposal.arguments, "agent": proposal.agent.name})
            schedule = services.create_schedule(
                owner,
                data,
                via=services.CHAT,
                now=now,
                conversation_id=proposal.conversation_id,
                run_id=proposal.run_id,
            )
        except InvalidSchedule as error:
            raise ProposalInvalid(error) from None
        Proposal.objects.filter(pk=proposal.pk).update(
            status=Proposal.Status.CONFIRMED, decided_at=now, schedule=schedule
        )
        return schedule, True

    return _decide(proposal_id, owner, now, create)


def decline(proposal_id: int, owner: AbstractBaseUser, *, now: datetime | None = None) -> Proposal:
    """Open to declined; nothing is created. Idempotent on a declined one. Raises
    Proposal.DoesNotExist (not the owner's), ProposalConfirmed, or ProposalExpired."""
    now = now or timezone.now()

    def record(proposal: Proposal, status: str) -> Proposal:
        if status == Proposal.Status.CONFIRMED:
            raise ProposalConfirmed(proposal)
        if status == Proposal.Status.OPEN:
            Proposal.objects.filter(pk=proposal.pk).update(status=Proposal.Status.DECLINED, decided_at=now)
        proposal.refresh_from_db()
        return proposal

    return _decide(proposal_id, owner, now, record)


def expire_stale(now: datetime | None = None) -> int:
    """Record the expiry of every open proposal past its time (the periodic reaper); how many.
    Idempotent; reads already treat such a proposal as expired."""
    return Proposal.objects.filter(status=Proposal.Status.OPEN, expires_at__lte=now or timezone.now()).update(
        status=Proposal.Status.EXPIRED
    )


def is_affirmative(text: str) -> bool:
    """ "yes", "Yes please!", "ok", "confirm", "do it.": the owner agreeing, and nothing else."""
    return AFFIRMATIVE.match(" ".join(text.split())) is not None


def confirm_from_message(
    conversation: Conversation, owner: AbstractBaseUser, text: str, *, now: datetime | None = None
) -> Schedule | None:
    """Before a message is sent: an affirmative answer in a conversation with exactly one open,
    unexpired proposal (and no run in flight) confirms it; the message is then sent as usual. The
    schedule created, or None when the message confirms nothing. Raises ProposalInvalid or
    ScheduleLimit when the confirmation is refused."""
    now = now or timezone.now()
    if not is_affirmative(text):
        return None
    if Run.objects.filter(conversation_id=conversation.pk, kind=Run.Kind.INTERACTIVE).in_flight().exists():
        return None
    waiting = list(
        Proposal.objects.filter(
            conversation_id=conversation.pk,
            owner_id=owner.pk,
            status=Proposal.Status.OPEN,
            expires_at__gt=now,
        ).values_list("pk", flat=True)[:2]
    )
    if len(waiting) != 1:
        return None
    try:
        schedule, _ = confirm(waiting[0], owner, now=now)
    except (Proposal.DoesNotExist, ProposalDeclined, ProposalExpired):
        return None  # decided by another request meanwhile
    return schedule


# -- the card -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposalCard:
    """A proposal as the owner reads it: what would be created, what the policy would pin, and what
    it would cost this month if created now, within the ceilings. `month` and `month_with` (the
    owner's month without and with it) are given for an open proposal only."""

    proposal: Proposal
    status: str
    kind: str
    title: str
    prompt: str
    cron: str | None
    timezone: str
    run_at: datetime | None
    cadence: str
    next_fires: list[datetime]  # in the owner's zone
    agent: str
    model: str
    limits: RunLimits
    max_consecutive_failures: int
    monthly_cap: Decimal | None
    forecast: Forecast
    month: MonthForecast | None = None
    month_with: MonthForecast | None = None

    @property
    def is_open(self) -> bool:
        return self.status == Proposal.Status.OPEN

    @property
    def schedule_id(self) -> int | None:
        return self.proposal.schedule_id

    @property
    def expires_at(self) -> datetime:
        return self.proposal.expires_at

    @property
    def more_stopped(self) -> int:
        """How many more runs the ceilings would refuse (or caps skip) this month with it, its own
        included."""
        if self.month is None or self.month_with is None:
            return 0
        return self.month_with.runs.stopped - self.month.runs.stopped

    @property
    def others_stopped(self) -> int:
        """Of those, the runs of the owner's other schedules."""
        return max(0, self.more_stopped - self.forecast.runs.stopped)


def _moment(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _next_fires(kind: str, cron: str, tz: str, run_at: datetime | None, now: datetime) -> list[datetime]:
    if kind == Schedule.Kind.ONE_TIME:
        return [run_at] if run_at is not None and run_at > now else []
    try:
        parsed, zone = recurrence.parse_cron(cron), recurrence.parse_timezone(tz)
    except recurrence.InvalidRecurrence:
        return []
    fires: list[datetime] = []
    cursor = now
    while len(fires) < NEXT_FIRES:
        slot = recurrence.next_slot(parsed, zone, cursor)
        if slot is None:
            break
        fires.append(slot)
        cursor = slot
    return fires


def cards(
    proposals: list[Proposal],
    owner_id: int,
    *,
    now: datetime | None = None,
    zone_name: str | None = None,
) -> list[ProposalCard]:
    """The cards of the owner's proposals (their agents read with them). The policy's limits are
    read once per agent, the owner's month once (schedules.forecast.OwnerMonth), and each proposal is
    simulated in it: what it would spend this month if created now, within the ceilings, and for an
    open one the month without and with it."""
    if not proposals:
        return []
    now = now or timezone.now()
    zone_name = zone_name or owner_timezone(owner_id)
    zone = owner_zone(zone_name)
    limits: dict[int, RunLimits] = {}
    owner_month = OwnerMonth(owner_id, now=now)
    found = []
    for proposal in proposals:
        arguments = proposal.arguments if isinstance(proposal.arguments, dict) else {}
        run_at = _moment(arguments.get("run_at"))
        cron = str(arguments.get("cron") or "")
        tz = str(arguments.get("timezone") or zone_name)
        kind = Schedule.Kind.ONE_TIME if run_at is not None else Schedule.Kind.RECURRING
        revision = ScheduleRevision(cron=cron, timezone=tz, run_at=run_at)
        fires = _next_fires(kind, cron, tz, run_at, now)
        agent = proposal.agent
        if agent.pk not in limits:
            limits[agent.pk] = services.create_policy_limits(agent, owner_id)
        pinned = limits[agent.pk]
        status = status_of(proposal, now)
        with_it = owner_month.month(extra=Extra(Cadence(kind, cron, tz, run_at), pinned.max_cost))
        assert with_it.extra is not None
        opened = status == Proposal.Status.OPEN
        found.append(
            ProposalCard(
                proposal=proposal,
                status=status,
                kind=kind,
                title=str(arguments.get("title", "")),
                prompt=str(arguments.get("prompt", "")),
                cron=cron or None,
                timezone=tz,
                run_at=run_at,
                cadence=revision.cadence if (cron or run_at) else "",
                next_fires=[fire.astimezone(zone) for fire in fires],
                agent=agent.name,
                model=agent.model,
                limits=pinned,
                max_consecutive_failures=services.CREATE_FAILURE_LIMIT,
                monthly_cap=None,  # the policy pins none
                forecast=with_it.extra,
                month=owner_month.month() if opened else None,
                month_with=with_it if opened else None,
            )
        )
    return found


def card(proposal: Proposal, *, now: datetime | None = None, zone_name: str | None = None) -> ProposalCard:
    """One proposal's card, with the month for an open one."""
    return cards([proposal], proposal.owner_id, now=now, zone_name=zone_name)[0]


def proposed_words(proposal: Proposal) -> str:
    """The tool's result for the model: what was proposed, and that it is not created yet."""
    arguments = proposal.arguments
    revision = ScheduleRevision(
        cron=arguments.get("cron") or "",
        timezone=arguments.get("timezone") or "UTC",
        run_at=_moment(arguments.get("run_at")),
    )
    return (
        f"Proposed schedule “{proposal.title}”: {revision.cadence}. It is not created yet: the owner "
        "confirms or declines it on the card shown in the conversation (it expires in 24 hours)."
    )
