"""`sim-assistant`: a small, deterministic assistant behind the simulated provider
(docs/contract.md#the-simulated-provider).

It reads the owner's newest message and the tool results that followed it, and answers over the
OpenAI wire format exactly as a model would: a tool call, or a final answer.

- "every weekday at 7:30 brief me on X", "every day at 9 …", "every Monday at 18:00 …": asks
  `clock_now` for the owner's time zone, calls `schedule_create` with a cron and that zone, then
  confirms in words with the pinned values the tool returned. When the tool only proposed it (the
  owner confirms first, docs/contract.md#confirm-before-chat-creates-a-schedule), it says so and
  asks the owner to confirm on the card or answer "yes".
- "yes" (or "ok", "confirm", "do it") right after such a proposal: the server confirmed it before
  this message was sent; it says it is done.
- "remind me tomorrow at 9 to X", "on 2026-12-24 at 08:00 …": `clock_now` for the date and
  zone, then a one-time `schedule_create` (run_at with the owner's offset).
- "rename schedule 5 to …", "move schedule 5 to 8:00": `schedule_update`.
- "give schedule 5 a USD 20 budget": `schedule_update` with `max_cost`, which the policy refuses
  (docs/decisions/0002, point 4); it explains the refusal and what to do instead.
- a question about the time or date: `clock_now`, then the answer; anything else: a short answer.

Told to synthesize (the platform's instruction), it never asks for a tool.
"""

from __future__ import annotations

import hashlib
import json
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

# The arguments of schedule_create beyond title and prompt, made of the time of day (hour, minute)
# with the clock's now and zone; None when the words name no such day.
Cadence = Callable[[tuple[int, int], datetime, str], dict[str, Any] | None]

_TIME = r"(?P<hour>\d{1,2})(?:[:.](?P<minute>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?"
_DAYS = {
    "day": "*",
    "weekday": "1-5",
    "weekend": "0,6",
    "monday": "1",
    "tuesday": "2",
    "wednesday": "3",
    "thursday": "4",
    "friday": "5",
    "saturday": "6",
    "sunday": "0",
}
_RECURRING = re.compile(rf"\bevery\s+(?P<days>{'|'.join(_DAYS)})s?\s+at\s+{_TIME}\b", re.IGNORECASE)
_TOMORROW = re.compile(rf"\btomorrow\s+at\s+{_TIME}\b", re.IGNORECASE)
_ON_DATE = re.compile(
    r"\bon\s+(?P<date>\d{4}-\d{2}-\d{2})\s+at\s+(?P<hour>\d{1,2})[:.](?P<minute>\d{2})\b", re.IGNORECASE
)
_RENAME = re.compile(r"\brename\s+schedule\s+#?(?P<id>\d+)\s+to\s+(?P<title>.+)", re.IGNORECASE | re.DOTALL)
_MOVE = re.compile(rf"\bmove\s+schedule\s+#?(?P<id>\d+)\s+to\s+{_TIME}\b", re.IGNORECASE)
_BUDGET = re.compile(
    r"\bgive\s+schedule\s+#?(?P<id>\d+)\s+(?:a\s+|an\s+)?(?:USD\s*|US\$\s*|\$)(?P<amount>\d{1,6}(?:\.\d{1,2})?)"
    r"\s+(?:budget|cost limit|limit)\b",
    re.IGNORECASE,
)
_TIME_QUESTION = re.compile(
    r"\b(what time|the time|what day|which day|today's date|what date|date today)\b", re.IGNORECASE
)
_CLOCK = re.compile(r"^(?P<iso>\S+) \((?P<zone>[^,()]+), (?P<weekday>\w+)\)")
_BRIEF = re.compile(
    r"^(?:brief me|give me a briefing|send me a briefing)\s+(?:on|about)\s+(?P<topic>.+)$", re.IGNORECASE
)
_REMIND = re.compile(
    r"^(?:remind me\s+)?to\s+(?P<what>.+)$|^remind me\s+(?:to\s+)?(?P<what2>.+)$", re.IGNORECASE
)
_QUOTES = "\"'\u201c\u201d\u2018\u2019"
_LIMITS_REFUSED = "cannot be changed by schedule.update"
_AFFIRMATIVE = re.compile(r"^(?:yes(?:,? please)?|confirm|ok(?:ay)?|do it)\s*[.!]*$", re.IGNORECASE)
_PROPOSED = re.compile(
    r"^Proposed schedule (?P<title>“.*?”): (?P<cadence>.*?)\. It is not created yet", re.DOTALL
)
_NOT_YET = "It is not created yet"


@dataclass
class _Turn:
    """The newest user message and what happened since: tool results by tool name."""

    text: str
    results: dict[str, str] = field(default_factory=dict)
    tools: frozenset[str] = frozenset()
    synthesize: bool = False
    key: str = ""
    previous: str = ""  # the assistant's answer before the newest user message


def reply(messages: list[dict[str, Any]], tools: list[str], *, synthesize: bool) -> dict[str, Any]:
    """The assistant message for this request: {"role", "content"} or {"role", "tool_calls"}."""
    turn = _read(messages, tools, synthesize)
    for step in (_affirmed, _budget, _rename, _move, _one_time, _recurring, _clock_question):
        found = step(turn)
        if found is not None:
            return found
    return _say(
        "I can set up briefings and reminders, and rename or move your schedules. Try “every "
        "weekday at 7:30 brief me on AI news” or “remind me tomorrow at 9 to renew the API key”."
    )


# -- reading the request ----------------------------------------------------------------------


def _read(messages: list[dict[str, Any]], tools: list[str], synthesize: bool) -> _Turn:
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    since = messages[last_user + 1 :]
    names: dict[str, str] = {}
    for message in since:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name"))
    results = {
        names.get(str(m.get("tool_call_id")), ""): str(m.get("content") or "")
        for m in since
        if m.get("role") == "tool"
    }
    text = str(messages[last_user].get("content") or "") if last_user >= 0 else ""
    previous = next(
        (
            str(m.get("content") or "")
            for m in reversed(messages[: max(last_user, 0)])
            if m.get("role") == "assistant"
        ),
        "",
    )
    key = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return _Turn(text.strip(), results, frozenset(tools), synthesize, key, previous)


def _hour_minute(match: re.Match[str]) -> tuple[int, int] | None:
    hour, minute = int(match.group("hour")), int(match.group("minute") or 0)
    ampm = (match.groupdict().get("ampm") or "").lower().replace(".", "")
    if ampm == "pm" and hour < 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    return (hour, minute) if hour < 24 and minute < 60 else None


def _clock(turn: _Turn) -> tuple[datetime, str] | None:
    """The owner's local now and time zone, from this turn's clock_now result."""
    match = _CLOCK.match(turn.results.get("clock_now", ""))
    if match is None:
        return None
    try:
        zone = zoneinfo.ZoneInfo(match.group("zone"))
        return datetime.fromisoformat(match.group("iso")).astimezone(zone), zone.key
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return None


def _subject(text: str) -> tuple[str, str]:
    """(title, prompt) from what the owner asked for, e.g. "brief me on AI news"."""
    words = " ".join(text.strip(" \t\n,.;:!?—-").split())
    brief = _BRIEF.match(words)
    if brief:
        topic = brief.group("topic").rstrip(".!?")
        return f"{topic[:1].upper()}{topic[1:]} briefing"[:120], (
            f"Research the latest on {topic} and write a short briefing with what changed and why it matters."
        )
    remind = _REMIND.match(words)
    if remind:
        what = (remind.group("what") or remind.group("what2") or "").rstrip(".!?")
        return f"Reminder: {what}"[:120], f"Remind me to {what}."
    if words:
        return f"{words[:1].upper()}{words[1:]}"[:120], words
    return "Scheduled briefing", text.strip() or "Write a short briefing."


# -- the intents, in the order they are tried ---------------------------------------------------


def _schedule_create(turn: _Turn, match: re.Match[str], cadence: Cadence) -> dict[str, Any]:
    """clock_now first (the owner's zone and date), then schedule_create, then the confirmation.
    `match` names the time of day; `cadence(at, now, zone)` makes the rest of the arguments of it,
    or None when there is no such time."""
    if "schedule_create" in turn.results:
        result = turn.results["schedule_create"]
        if result.startswith("Error:"):
            return _say(f"I could not create that schedule: {result.removeprefix('Error:').strip()}")
        proposed = _PROPOSED.match(result)
        if proposed:
            return _say(
                f"I propose a schedule {proposed.group('title')}: {proposed.group('cadence')}. {_NOT_YET}: "
                "check it on the card below and confirm it there, or answer “yes”. If you do neither, "
                "it expires in 24 hours."
            )
        return _say(f"Done: I c{result[1:]}" if result.startswith("Created") else result)
    if turn.synthesize:
        return _say("I ran out of room in this run before I could create the schedule; nothing was created.")
    if "schedule_create" not in turn.tools:
        return _say("I cannot create schedules here: this assistant has no schedule.create tool.")
    clock = _clock(turn)
    if clock is None and "clock_now" in turn.tools and "clock_now" not in turn.results:
        return _call(turn, "clock_now", {})
    now, zone = clock or (datetime.now(zoneinfo.ZoneInfo("UTC")), "UTC")
    at, title, prompt = _when_and_what(turn, match)
    when = None if at is None else cadence(at, now, zone)
    if when is None:
        return _say("That time does not exist on a clock; tell me a time such as 07:30.")
    return _call(turn, "schedule_create", {"title": title, "prompt": prompt, **when})


def _when_and_what(turn: _Turn, match: re.Match[str]) -> tuple[tuple[int, int] | None, str, str]:
    """The time of day the words name, and the title and prompt the rest of the message makes."""
    rest = (turn.text[: match.start()] + " " + turn.text[match.end() :]).strip()
    return (_hour_minute(match), *_subject(rest))


def _recurring(turn: _Turn) -> dict[str, Any] | None:
    match = _RECURRING.search(turn.text)
    if match is None:
        return None
    days = _DAYS[match.group("days").lower()]

    def cadence(at: tuple[int, int], now: datetime, zone: str) -> dict[str, Any]:
        return {"cron": f"{at[1]} {at[0]} * * {days}", "timezone": zone}

    return _schedule_create(turn, match, cadence)


def _one_time(turn: _Turn) -> dict[str, Any] | None:
    tomorrow, on_date = _TOMORROW.search(turn.text), _ON_DATE.search(turn.text)
    match = on_date or tomorrow
    if match is None:
        return None

    def cadence(at: tuple[int, int], now: datetime, zone: str) -> dict[str, Any] | None:
        try:
            day = date.fromisoformat(on_date.group("date")) if on_date else now.date() + timedelta(days=1)
        except ValueError:
            return None
        run_at = datetime.combine(day, time(*at), tzinfo=zoneinfo.ZoneInfo(zone))
        return {"run_at": run_at.isoformat()}

    return _schedule_create(turn, match, cadence)


def _affirmed(turn: _Turn) -> dict[str, Any] | None:
    """The owner agreed to the schedule proposed in the previous answer: the server confirmed it
    before this message was sent (schedules.proposals)."""
    if _NOT_YET not in turn.previous or not _AFFIRMATIVE.match(" ".join(turn.text.split())):
        return None
    return _say("Done — it is on your schedules.")


def _schedule_update(turn: _Turn, schedule_id: int, changes: dict[str, Any], done: str) -> dict[str, Any]:
    if "schedule_update" in turn.results:
        result = turn.results["schedule_update"]
        if _LIMITS_REFUSED in result:
            return _say(_limits_refusal(schedule_id, changes))
        if result.startswith("Error:"):
            reason = result.removeprefix("Error:").strip()
            return _say(f"I could not change schedule {schedule_id}: {reason}.")
        return _say(f"{done} {result}")
    if turn.synthesize:
        return _say(f"I ran out of room in this run before I could change schedule {schedule_id}.")
    if "schedule_update" not in turn.tools:
        return _say("I cannot change schedules here: this assistant has no schedule.update tool.")
    return _call(turn, "schedule_update", {"schedule_id": schedule_id, **changes})


def _limits_refusal(schedule_id: int, changes: dict[str, Any]) -> str:
    amount = changes.get("max_cost", "")
    return (
        f"I cannot give schedule {schedule_id} a USD {amount} budget: schedule.update refused it, because "
        "a schedule's limits and its failure limit are pinned and are never changed in chat. "
        "What to do instead: ask an admin to pin an explicit revision with the new budget "
        "(Django admin → Schedules → the schedule → “Pin a revision”, with a reason), or use an API "
        "token with the pin_revision scope. Runs already started keep their limits."
    )


def _budget(turn: _Turn) -> dict[str, Any] | None:
    match = _BUDGET.search(turn.text)
    if match is None:
        return None
    amount = f"{float(match.group('amount')):.2f}"
    return _schedule_update(turn, int(match.group("id")), {"max_cost": amount}, "Done:")


def _rename(turn: _Turn) -> dict[str, Any] | None:
    match = _RENAME.search(turn.text)
    if match is None:
        return None
    title = match.group("title").strip().strip(_QUOTES).rstrip(".!").strip()[:200]
    return _schedule_update(turn, int(match.group("id")), {"title": title}, "Done, renamed:")


def _move(turn: _Turn) -> dict[str, Any] | None:
    match = _MOVE.search(turn.text)
    if match is None:
        return None
    at = _hour_minute(match)
    if at is None:
        return _say("That time does not exist on a clock; tell me a time such as 08:00.")
    changes = {"time_of_day": f"{at[0]:02d}:{at[1]:02d}"}
    return _schedule_update(turn, int(match.group("id")), changes, "Done, moved:")


def _clock_question(turn: _Turn) -> dict[str, Any] | None:
    if not _TIME_QUESTION.search(turn.text):
        return None
    clock = _clock(turn)
    if clock is not None:
        now, zone = clock
        return _say(f"It is {now:%A} {now.day} {now:%B %Y}, {now:%H:%M} in {zone}.")
    if turn.synthesize or "clock_now" not in turn.tools or "clock_now" in turn.results:
        return _say("I cannot read the clock from here.")
    return _call(turn, "clock_now", {})


# -- the message shapes ---------------------------------------------------------------------------


def _say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _call(turn: _Turn, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{name}_{turn.key}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
