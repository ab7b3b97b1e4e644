"""Dashboard and admin forms. Validation is the shared pydantic models' (schedules.schemas), so
the dashboard, the admin, the chat tools and the API refuse the same input in the same words.
The Django fields here only carry values and widgets."""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any, ClassVar

from django import forms

from accounting import alerts
from accounting.money import format_money, parse_money
from accounting.numbers import WholeNumberField, signed_whole_number
from runs import conversations
from runs.limits import LIMIT_FIELDS, LIMIT_LABELS, InvalidLimits, RunLimits, validate_limits
from runs.models import Agent
from schedules.models import Schedule, ScheduleRevision
from schedules.schemas import (
    NOT_UPDATABLE,
    DeclineBody,
    ExplicitRevision,
    InvalidSchedule,
    RevisionRequestBody,
    ScheduleCreate,
    ScheduleUpdate,
    parse_create,
    parse_decline,
    parse_explicit,
    parse_revision_request,
    parse_update,
)

KIND_CHOICES = [
    (Schedule.Kind.RECURRING.value, "Recurring"),
    (Schedule.Kind.ONE_TIME.value, "One time"),
]
LOCAL_INPUT = "%Y-%m-%dT%H:%M"


@cache
def timezone_choices() -> list[tuple[str, str]]:
    names = sorted(n for n in zoneinfo.available_timezones() if "/" in n and not n.startswith("Etc/"))
    return [(name, name) for name in ["UTC", *names]]


def _text(label: str, *, help_text: str = "", **attrs: Any) -> forms.CharField:
    return forms.CharField(
        label=label, required=False, help_text=help_text, widget=forms.TextInput(attrs=attrs), strip=True
    )


def _offer_agents(form: forms.Form, agents: list[str]) -> None:
    """The agent select offers the active agents by name."""
    widget = form.fields["agent"].widget
    assert isinstance(widget, forms.Select)
    widget.choices = [(name, name) for name in agents]


class PydanticForm(forms.Form):
    """A form whose rules live in a pydantic model; errors land on the field they name. A form that
    names its `validator` is checked by it on clean, with the `body` it builds from its fields."""

    validator: ClassVar[Any] = None  # staticmethod(one of the shared parse_* validators)

    def body(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        return cleaned

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.validator is not None:
            self.parse(self.validator, self.body(cleaned))
        return cleaned

    def add_field_errors(self, fields: dict[str, str]) -> None:
        for name, message in fields.items():
            target = name.removeprefix("limits.")
            self.add_error(target if target in self.fields else None, message)

    def parse(self, parser: Callable[[Any], Any], data: Any, *, into: str = "parsed") -> None:
        """`into` (`parsed`, unless named) is what the parser every surface shares makes of `data`;
        or its errors go on the fields they name."""
        try:
            setattr(self, into, parser(data))
        except (InvalidSchedule, conversations.InvalidMessage) as exc:
            self.add_field_errors(exc.fields)

    def _omit_blank(self, data: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in data.items() if v not in ("", None)}


def _local_datetime(value: str, tz: str) -> str | datetime:
    """A datetime-local value in the schedule's zone, as an aware datetime; anything else is
    passed through for the shared validator to name."""
    try:
        naive = datetime.strptime(value, LOCAL_INPUT)
        return naive.replace(tzinfo=zoneinfo.ZoneInfo(tz))
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return value


class ScheduleCreateForm(PydanticForm):
    title = _text("Title", maxlength=200, required=True, autocomplete="off")
    agent = forms.CharField(label="Agent", required=False, widget=forms.Select())
    prompt = forms.CharField(
        label="Prompt",
        required=False,
        widget=forms.Textarea(attrs={"rows": 5, "required": True}),
        help_text="What the assistant is asked to do on each run.",
    )
    kind = forms.ChoiceField(
        label="Runs", choices=KIND_CHOICES, initial=Schedule.Kind.RECURRING, widget=forms.RadioSelect
    )
    cron = _text(
        "Recurrence",
        help_text='A cron expression such as "0 9 * * *", or plain words: "daily at 09:00", '
        '"weekdays at 7:30", "every monday at 18:00".',
        placeholder="daily at 09:00",
        autocomplete="off",
    )
    run_at = forms.CharField(
        label="Run once at",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="In the time zone below.",
    )
    timezone = forms.CharField(
        label="Time zone", required=False, widget=forms.Select(choices=timezone_choices())
    )

    parsed: ScheduleCreate

    def __init__(self, *args: Any, agents: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _offer_agents(self, agents)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tz = cleaned.get("timezone") or "UTC"
        data: dict[str, Any] = {
            "title": cleaned.get("title"),
            "prompt": cleaned.get("prompt"),
            "agent": cleaned.get("agent"),
        }
        if cleaned.get("kind") == Schedule.Kind.ONE_TIME:
            data["run_at"] = _local_datetime(cleaned.get("run_at") or "", tz)
            data["timezone"] = tz
            if not cleaned.get("run_at"):
                self.add_error("run_at", "run_at is required for a one-time schedule")
                return cleaned
        else:
            data["cron"] = cleaned.get("cron")
            data["timezone"] = tz
        self.parse(parse_create, self._omit_blank(data))
        return cleaned


class ScheduleUpdateForm(PydanticForm):
    """Title, prompt, cadence and time zone. Limit fields are never offered; if posted anyway,
    the shared validator refuses them with its own message."""

    title = _text("Title", maxlength=200, required=True, autocomplete="off")
    prompt = ScheduleCreateForm.base_fields["prompt"]
    cron = ScheduleCreateForm.base_fields["cron"]
    run_at = ScheduleCreateForm.base_fields["run_at"]
    timezone = ScheduleCreateForm.base_fields["timezone"]

    parsed: ScheduleUpdate

    def __init__(self, data: Any = None, *, schedule: Schedule, **kwargs: Any) -> None:
        self.schedule = schedule
        revision = schedule.revision
        initial = {"title": revision.title, "prompt": revision.prompt, "timezone": revision.timezone}
        if revision.run_at:
            initial["run_at"] = revision.run_at.astimezone(zoneinfo.ZoneInfo(revision.timezone)).strftime(
                LOCAL_INPUT
            )
        else:
            initial["cron"] = revision.cron
        super().__init__(data, initial={**initial, **kwargs.pop("initial", {})}, **kwargs)
        del self.fields["cron" if schedule.kind == Schedule.Kind.ONE_TIME else "run_at"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        data: dict[str, Any] = {
            key: cleaned.get(key) for key in ("title", "prompt", "cron", "timezone") if key in self.fields
        }
        if "run_at" in self.fields:
            data["run_at"] = _local_datetime(cleaned.get("run_at") or "", cleaned.get("timezone") or "UTC")
        # Posted limit fields go to the validator, which refuses them in the words every surface uses.
        data.update({key: self.data[key] for key in self.data if key in NOT_UPDATABLE})
        self.parse(parse_update, data)
        return cleaned


# -- conversations and completion notices ------------------------------------------------------


class MessageForm(PydanticForm):
    """A message to the assistant; the rules are runs.conversations.parse_message's."""

    message = forms.CharField(
        label="Message",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Ask for a briefing or a reminder…"}),
    )

    parsed_message: str

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        self.parse(conversations.parse_message, cleaned.get("message") or "", into="parsed_message")
        return cleaned


class ConversationForm(MessageForm):
    """A new conversation: the agent to talk to and the first message."""

    agent = forms.CharField(label="Agent", required=False, widget=forms.Select())

    field_order = ["agent", "message"]
    parsed_agent: Agent

    def __init__(self, *args: Any, agents: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _offer_agents(self, agents)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        self.parse(conversations.usable_agent, cleaned.get("agent") or "", into="parsed_agent")
        return cleaned


class CompletionSettingsForm(PydanticForm):
    completion_email = forms.BooleanField(
        label="Email me when a scheduled run completes, with its answer", required=False
    )
    completion_webhook = forms.BooleanField(
        label="POST a signed notice to my webhook when a scheduled run completes", required=False
    )
    webhook_content = forms.BooleanField(
        label="Include the answer in webhook notices (content leaves this product)", required=False
    )
    completion_only_changed = forms.BooleanField(
        label="Only when the answer changed from the schedule's previous run", required=False
    )


COMPLETION_CHOICES = [("", "Follow my settings"), ("on", "Always tell me"), ("off", "Never tell me")]


class ScheduleCompletionForm(forms.Form):
    """A schedule's override of the owner's completion-notice setting."""

    completion_notices = forms.ChoiceField(
        label="When a run of this schedule completes", choices=COMPLETION_CHOICES, required=False
    )

    def value(self) -> bool | None:
        return {"on": True, "off": False}.get(self.cleaned_data.get("completion_notices") or "")


# -- limits: the admin's explicit revision and the owner's request ------------------------------

FAILURE_LIMIT_LABEL = "Failure limit (failed runs in a row)"
FAILURE_LIMIT_HELP = "Consecutive failed runs that pause the schedule."
DIMENSION_NAMES = {"steps": "Steps", "model_calls": "Model calls", "tool_calls": "Tool calls", "cost": "Cost"}


def _limit_field(name: str) -> forms.CharField:
    mode = "decimal" if name.endswith("cost") else "numeric"
    return _text(LIMIT_LABELS[name], inputmode=mode, autocomplete="off", size="8")


class LimitsForm(PydanticForm):
    """The complete RunLimits and the failure limit, labelled for people; with `current`, the
    values in force are each input's placeholder."""

    max_steps = _limit_field("max_steps")
    synthesis_reserve_steps = _limit_field("synthesis_reserve_steps")
    max_model_calls = _limit_field("max_model_calls")
    synthesis_reserve_model_calls = _limit_field("synthesis_reserve_model_calls")
    max_tool_calls = _limit_field("max_tool_calls")
    synthesis_reserve_tool_calls = _limit_field("synthesis_reserve_tool_calls")
    max_cost = _limit_field("max_cost")
    synthesis_reserve_cost = _limit_field("synthesis_reserve_cost")
    max_consecutive_failures = _text(
        FAILURE_LIMIT_LABEL, inputmode="numeric", autocomplete="off", size="8", help_text=FAILURE_LIMIT_HELP
    )
    monthly_cap = _text(
        "Monthly cap (USD)",
        inputmode="decimal",
        autocomplete="off",
        size="10",
        help_text="What the schedule may spend in a calendar month; a run that would cross it is skipped, "
        "not failed. Empty: no cap. At least the cost limit of one run.",
    )

    def __init__(self, *args: Any, current: ScheduleRevision | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if current is not None:
            values = {**current.limits, "max_consecutive_failures": current.max_consecutive_failures}
            for name, value in values.items():
                if name in self.fields:
                    self.fields[name].widget.attrs["placeholder"] = str(value)

    @staticmethod
    def values_of(
        limits: dict[str, Any], failure_limit: int, monthly_cap: Decimal | None = None
    ) -> dict[str, str]:
        """Initial values from stored limits (a revision's or a request's)."""
        return {
            **{name: str(limits[name]) for name in LIMIT_FIELDS if name in limits},
            "max_consecutive_failures": str(failure_limit),
            "monthly_cap": format_money(monthly_cap) if monthly_cap is not None else "",
        }

    def typed_cap(self) -> Decimal | None:
        """The monthly cap as typed, when it is a valid amount (the replay shows what it would have
        skipped); None when empty, unbound or invalid."""
        if not self.is_bound:
            return None
        try:
            return parse_money((self.data.get("monthly_cap") or "").strip(), "monthly_cap") or None
        except ValueError:
            return None

    def dimension_rows(self) -> list[tuple[str, forms.BoundField, forms.BoundField, str]]:
        """(dimension, its limit, its reserve, the unit) for a table of aligned inputs."""
        return [
            (words, self[f"max_{d}"], self[f"synthesis_reserve_{d}"], "USD" if d == "cost" else "")
            for d, words in DIMENSION_NAMES.items()
        ]

    def checked_limits(self) -> RunLimits | None:
        """The limits as typed, when they are valid whatever the other fields are (the replay of
        the recent runs needs only them); None when unbound or invalid."""
        if not self.is_bound:
            return None
        self.is_valid()
        try:
            return validate_limits(self.body(self.cleaned_data).get("limits", {}))
        except InvalidLimits:
            return None

    def body(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        limits = {name: _number(cleaned.get(name, "")) for name in LIMIT_FIELDS}
        return self._omit_blank(
            {
                "limits": self._omit_blank(limits),
                "max_consecutive_failures": _number(cleaned.get("max_consecutive_failures", "")),
                "reason": cleaned.get("reason", ""),
            }
        ) | {"monthly_cap": (cleaned.get("monthly_cap") or "").strip() or None}  # empty: no cap


def _reason(label: str, help_text: str) -> forms.CharField:
    """A required reason, in words (checked by the shared validator, so its message is the API's)."""
    return forms.CharField(
        label=label,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "required": True}),
        help_text=help_text,
    )


class PinRevisionForm(LimitsForm):
    """An explicit revision: the complete RunLimits, the failure limit and a required reason;
    `request` names the owner's revision request it answers, if any."""

    reason = _reason("Reason", "Required. Recorded on the revision with your name and the time.")
    base_revision = WholeNumberField(widget=forms.HiddenInput, required=False)
    request = WholeNumberField(widget=forms.HiddenInput, required=False)

    parsed: ExplicitRevision
    validator = staticmethod(parse_explicit)

    @classmethod
    def initial_for(cls, revision: ScheduleRevision) -> dict[str, Any]:
        return {
            **cls.values_of(revision.limits, revision.max_consecutive_failures, revision.monthly_cap),
            "base_revision": revision.number,
        }


class RevisionRequestForm(LimitsForm):
    """The owner's request: the limits they need and why (an admin decides)."""

    reason = _reason("Why these limits", "Required. The admin who decides reads it; say what the runs need.")

    parsed: RevisionRequestBody
    validator = staticmethod(parse_revision_request)


class DeclineForm(PydanticForm):
    """Why a revision request is declined (the owner is told)."""

    reason = _reason("Why it is declined", "Required. The owner is told these words.")

    parsed: DeclineBody
    validator = staticmethod(parse_decline)

    def body(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        return {"reason": cleaned.get("reason", "")}


def _number(value: str) -> int | str:
    """Whole numbers (ASCII digits, accounting.numbers) become int; anything else (money, other
    digit systems, superscripts, typos) stays text, which the shared validator refuses in words,
    as the API does."""
    number = signed_whole_number(value or "")
    return number if number is not None else (value or "").strip()


class NotificationSettingsForm(PydanticForm):
    """Channels for pause notifications; the URL rules live in schedules.notices.channels."""

    email_enabled = forms.BooleanField(label="Email me when a schedule pauses itself", required=False)
    webhook_enabled = forms.BooleanField(label="POST a signed JSON notice to a webhook", required=False)
    webhook_url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=500,
        strip=True,
        widget=forms.URLInput(
            attrs={"placeholder": "https://example.com/hooks/paused", "autocomplete": "off"}
        ),
        help_text="https:// only (plain http is accepted for localhost while developing).",
    )


class ChatSettingsForm(forms.Form):
    """Whether a schedule the assistant proposes in chat waits for the owner's confirmation
    (docs/contract.md#confirm-before-chat-creates-a-schedule)."""

    confirm_chat_schedules = forms.BooleanField(
        label="Ask me to confirm schedules the assistant proposes in chat", required=False
    )


class AlertThresholdsForm(forms.Form):
    """The owner's alert thresholds as typed: whole percentages separated by commas or spaces."""

    thresholds = forms.CharField(
        label="Tell me when spend reaches these percentages of a ceiling",
        required=False,
        max_length=100,
        help_text="Up to five whole numbers from 1 to 100, such as 50, 80, 100. Empty: no alerts.",
        widget=forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off", "size": "20"}),
    )

    parsed: list[int]

    def clean_thresholds(self) -> str:
        text = self.cleaned_data.get("thresholds") or ""
        words = [w for w in re.split(r"[\s,;]+", text.replace("%", " ")) if w]
        numbers: list[Any] = [int(w) if w.isascii() and w.isdigit() else w for w in words]
        try:
            self.parsed = alerts.parse_thresholds(numbers)
        except alerts.InvalidThresholds as exc:
            raise forms.ValidationError(str(exc)[:1].upper() + str(exc)[1:] + ".") from None
        return text
