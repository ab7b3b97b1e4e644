"""The run loop (docs/contract.md#the-run-loop, docs/decisions/0001, as amended), the same for every run
kind.

Before each model request: stop if cancelled or out of time; fail `budget_exhausted` if a hard
limit (steps, model calls, cost) is used up; otherwise the request is synthesis-only when a
reserve is active or the tool budget is exhausted, and then carries the volatile instruction.
After each response: usage is recorded atomically (ledger entry + counters); tool calls in a
synthesis-only turn fail closed; tool calls beyond the budget get an error result; a final
answer completes the run.

Each model call streams (docs/decisions/0006-streaming.md): before it is sent it is recorded as the
run's open call with its worst case, in the one statement that also checks the run is still ours; a
watch (runs.watch) shows its text as it comes and cuts it on Stop, at the deadline or when the
provider goes quiet; a call cut before its usage arrived is charged an estimate that never
undercounts, and a retry after it is a new call with its own bound.

The kinds of step beside the model call live apart: the transcript entries and the history read
back (runs.transcript), tools (runs.tools), delegation (runs.delegation), and the atomic write
of each step (runs.steps).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from accounting import ledger
from runs import bounds, delegation, outbound, pricing, services, transcript
from runs.failures import (
    BudgetExhausted,
    Diagnostics,
    InternalError,
    Outcome,
    ProviderPermanentError,
    ProviderTransientError,
    RunFailure,
    RunTimeout,
    SynthesisReserveViolation,
)
from runs.limits import RunLimits, budget_state, tool_calls_that_fit
from runs.models import Run, TranscriptEntry
from runs.providers import GATE_WAITED, CutCall, adapter_for, backoff_delay, call_with_retries, client_for
from runs.providers.base import (
    SYNTHESIS_INSTRUCTION,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSpec,
    diagnostics,
)
from runs.steps import Opening, Step, open_call, step_statement, write_step
from runs.tools import Tool, ToolContext, invoke, tools_for
from runs.watch import CallWatch

logger = logging.getLogger(__name__)

RUN_STATE = ["status", "attempt", "steps", "model_calls", "tool_calls", "cost", "synthesis_dimension"]
# What the loop reads before each request, without building a queryset each time.
_STATE_SQL = f"SELECT {', '.join(RUN_STATE)} FROM {Run._meta.db_table} WHERE id = %s"  # noqa: S608 - constants


class _Stopped(Exception):
    """The run is no longer ours to drive: cancelled, or reaped and replaced."""


@dataclass(frozen=True)
class _Step:
    """A step not yet written: the response's charge, the tool calls it counts, its transcript rows."""

    call: ledger.Call
    tool_calls: int
    rows: list[TranscriptEntry]


@dataclass
class _Loop:
    run: Run
    client: httpx.Client  # to the provider
    tools_http: httpx.Client  # for tools such as http.fetch
    sleep: Callable[[float], None]
    # A delegated child ends no later than its parent must; None: this run's own time limit.
    outer_deadline: float | None = None
    limits: RunLimits = field(init=False)
    tools: list[Tool] = field(init=False)
    specs: tuple[ToolSpec, ...] = field(init=False)
    history: list[Message] = field(init=False)
    seq: int = field(init=False)

    def __post_init__(self) -> None:
        self.limits = self.run.run_limits
        self.tools = tools_for(self.run.agent)
        self.specs = tuple(tool.spec() for tool in self.tools)  # a JSON schema export is not free
        self.history, self.seq = transcript.read_history(self.run)
        self.attempt = self.run.attempt
        self.unwritten: list[TranscriptEntry] = []
        # A step is written before a tool that waits (a fetch, a child run); otherwise with the next
        # call's opening, one statement for both (runs.steps.write_step), or in the run's end (flush).
        self.pending: _Step | None = None
        # The open call came back (an answer, or a cut): the provider billed it, and until its step
        # is written only its open call in the database says so. Should the loop fail before that
        # write commits, the run's end charges the call's bound (execute_run).
        self.answered = False
        self.transient_in_a_row = 0  # charged calls that were not answers: empty, or cut (retried)
        self.call_id = ""  # the call on the wire, or the last one
        # For the next call's input bound: the input the last response reported, and how many history
        # messages its request carried (docs/contract.md#bounded-before-the-call).
        self.last_input: int | None = None
        self.sent_messages = 0
        self.reserve_reached = False  # a turn was cut by the dollars outside the cost reserve
        self.adapter = adapter_for(self.run.agent, self.client)
        own = (self.run.started_at or timezone.now()).timestamp() + settings.RUN_MAX_SECONDS
        self.deadline = min(own, self.outer_deadline) if self.outer_deadline else own
        self.schedule_id = self.run.conversation.schedule_id
        self.ancestors = _ancestor_ids(self.run)
        self.context = ToolContext(
            run=self.run, agent=self.run.agent, http=self.tools_http, delegate=self.delegate
        )

    def drive(self) -> Outcome:
        self.sheet = self.price_sheet()
        while True:
            self.check_time()
            state = budget_state(self.limits, self.run.usage())
            if state.exhausted:
                raise BudgetExhausted(
                    f"The {state.exhausted.replace('_', ' ')} limit of this run is used up.",
                    dimension=state.exhausted,
                )
            plan = self.plan_call(state.synthesis)  # the output cap the dollars left pay for
            response = self.request(plan)
            if response is None:
                continue  # a cut call, charged: the next is a new call with its own bound
            if response.usage is None:
                self.charge_worst_case(plan, response)  # fails the run closed
            if response.is_empty:
                self.record_empty(response)  # charged, then asked again like any transient error
                continue
            self.transient_in_a_row = 0
            # The tool calls that will run are counted with the usage, before any runs: one write.
            late = time.time() > self.deadline  # recorded all the same; no tool will run
            cut = response.truncated and plan.capped_by_dollars
            runnable = (
                0
                if plan.synthesis or response.defect or late or cut
                else self.tool_calls_that_fit(len(response.tool_calls))
            )
            # Written now only when a tool that waits runs next; otherwise with what follows: the next
            # call's opening, or the run's end (the answer, a limit, a failure).
            waits = not self.all_instant(response.tool_calls[:runnable])
            step = self.record_response(response, tool_calls=runnable, defer=not waits)
            self.check_time()
            if response.defect:
                raise ProviderPermanentError(
                    f"The provider's response was unusable: {response.defect}.",
                    diagnostics=diagnostics(self.adapter.name, status=200),
                )
            if cut:  # its partial text is in the transcript; the dollars for more were not there
                if not plan.synthesis and self.limits.synthesis_reserve_cost > 0:
                    self.reserve_reached = True  # the dollars outside it ran out: synthesis is next
                    continue
                raise BudgetExhausted(
                    f"The response was cut at {plan.cap:,} output tokens, the most the cost limit "
                    "left room for; its partial text is kept in the conversation.",
                    dimension="cost",
                )
            if not response.tool_calls:
                return Outcome(
                    status=Run.Status.COMPLETED, answer=response.text, answer_cut=response.truncated
                )
            if plan.synthesis:
                # docs/decisions/0001, point 3: fail closed; no tool runs inside the reserve.
                raise SynthesisReserveViolation(
                    f"The model asked for {len(response.tool_calls)} tool call(s) in a synthesis-only turn "
                    f"(reserve activated by {plan.synthesis.replace('_', ' ')}).",
                    dimension=plan.synthesis,
                )
            self.run_tools(response.tool_calls, step, runnable=runnable)

    # -- before a request ---------------------------------------------------------------------

    def check_still_ours(self) -> None:
        """Before every request: stop if the run was cancelled or reaped meanwhile (by anyone,
        a tool of the run included), and read the counters a delegated child may have moved."""
        attempt = self.run.attempt
        if not _read_state(self.run):
            raise _Stopped  # deleted
        if self.run.status != Run.Status.RUNNING or self.run.attempt != attempt:
            raise _Stopped
        self.check_time()

    def check_time(self) -> None:
        if time.time() > self.deadline:
            raise RunTimeout(f"The run exceeded its time limit of {settings.RUN_MAX_SECONDS} s.")

    def price_sheet(self) -> pricing.PriceSheet:
        agent = self.run.agent
        try:
            return agent.price_sheet()
        except (pricing.NoPrice, ValueError) as exc:
            # An agent saved before prices were checked, or edited around the admin: nothing is
            # sent, since its calls could not be charged (or bounded).
            reason = exc.message if isinstance(exc, pricing.NoPrice) else str(exc)
            raise ProviderPermanentError(
                f"{reason}; nothing was sent.", diagnostics=diagnostics(self.adapter.name, code="no_price")
            ) from None

    def plan_call(self, synthesis: str | None) -> bounds.CallPlan:
        """The next request with its output cap (docs/contract.md#bounded-before-the-call). A turn that
        is not synthesis-only may spend only the dollars outside the cost reserve: that part is held for
        the answer. When those cannot pay for a call of MIN_OUTPUT_TOKENS, the run takes its owed
        synthesis turn (the cost reserve is reached) if the whole of what is left pays for one; otherwise
        the cost limit is used up and no call is made."""
        left = self.limits.max_cost - self.run.cost - pricing.MICRO  # room to round the charge up
        reserve = self.limits.synthesis_reserve_cost
        if synthesis is None and self.reserve_reached:
            synthesis = "cost"
        if synthesis is None:
            plan = self.fit(None, left - reserve)
            if plan is not None:
                return plan
            if reserve <= 0:
                raise self.no_room(left)
            synthesis = "cost"
        plan = self.fit(synthesis, left)
        if plan is None:
            raise self.no_room(left)
        return plan

    def fit(self, synthesis: str | None, budget: Decimal) -> bounds.CallPlan | None:
        request = ModelRequest(
            model=self.run.agent.model,
            system=self.run.agent.system_prompt,
            messages=tuple(self.history),
            tools=self.specs,
            synthesis_instruction=SYNTHESIS_INSTRUCTION if synthesis else None,
        )
        if self.last_input is None:
            input_bound = bounds.request_bytes(request)
        else:
            added = self.history[self.sent_messages :]
            input_bound = self.last_input + bounds.added_bytes(added, request.synthesis_instruction)
        kinds = pricing.PROVIDER_KINDS.get(self.run.agent.provider, pricing.KINDS)
        return bounds.plan_call(
            self.sheet,
            kinds,
            request,
            input_bound=input_bound,
            budget=budget,
            synthesis=synthesis,
            ceiling=self.run.agent.max_output_tokens,
        )

    def no_room(self, left: Decimal) -> BudgetExhausted:
        floor = min(settings.MIN_OUTPUT_TOKENS, self.run.agent.max_output_tokens)
        return BudgetExhausted(
            f"The cost limit of this run is used up: the USD {max(left, Decimal(0)):.6f} left cannot pay "
            f"for a call of {floor} output tokens.",
            dimension="cost",
        )

    def request(self, plan: bounds.CallPlan) -> ModelResponse | None:
        """The call, streamed: recorded as open (if the run is still ours), sent with its retries,
        watched. None when it was cut and charged, and may be made again (a new call)."""
        self.open(plan)
        request = plan.request
        watch = CallWatch(self.run.pk, self.attempt, self.call_id, deadline=self.deadline)

        def between_attempts(attempt: int) -> None:
            if attempt:  # a retry, or a wait at the provider's gate (GATE_WAITED)
                self.check_still_ours()
            if attempt == GATE_WAITED:
                self.check_time()
            release_connection()  # nothing is read or written while the provider answers

        try:
            response = call_with_retries(
                self.adapter, request, sleep=self.sleep, before_attempt=between_attempts, watch=watch
            )
        except CutCall as cut:
            self.answered = True
            self.charge_cut(plan, cut)
            return None
        except ProviderError as error:
            message = _redact(error.message, self.adapter)
            found = _redact_diagnostics(error.diagnostics, self.adapter)
            if error.transient:
                raise ProviderTransientError(message, diagnostics=found) from None
            raise ProviderPermanentError(message, diagnostics=found) from None
        self.answered = True
        self.sent_messages = len(request.messages)
        self.last_input = response.usage.input_tokens if response.usage is not None else None
        self.plan = plan
        return response

    def open(self, plan: bounds.CallPlan) -> None:
        """Before the call is sent: the run is still ours, and the call is its open call, with its
        worst case, in one statement (runs.steps.open_call); with the step before it, when that
        one is still pending (no tool that waits came between them; runs.steps.write_step)."""
        self.call_id = uuid.uuid4().hex
        bound = self.bound_of(
            plan, output_tokens=plan.cap, basis="estimate: its worker was lost while the call was on the wire"
        )
        if self.pending is not None:
            opening = Opening(self.call_id, bound, synthesis=plan.synthesis or "")
            if not self.write_pending(opening):
                raise _Stopped  # ended meanwhile: whoever ended it charged the previous call
        else:
            zone = open_call(
                self.run, self.attempt, self.call_id, bound, self.ancestors, synthesis=plan.synthesis or ""
            )
            if zone is None:
                raise _Stopped
            self.context.knows_owner_timezone(zone)
        if plan.synthesis and not self.run.synthesis_dimension:
            self.run.synthesis_dimension, self.run.synthesis_step = plan.synthesis, self.run.steps + 1

    def bound_of(self, plan: bounds.CallPlan, *, output_tokens: int, basis: str) -> ledger.Call:
        """The ledger entry of a call whose usage is not known: the input bound and `output_tokens`
        (at most the cap), at the rates of the bound (runs.bounds.CallPlan.estimate), marked estimated."""
        cost, by_kind = plan.estimate(output_tokens)
        return ledger.Call(
            **self.call_fields(),
            input_tokens=plan.input_bound,
            output_tokens=min(output_tokens, plan.cap),
            cost=cost,
            computed_cost=cost,
            charged_by_kind=by_kind,
            prices={**self.sheet.recorded, "bound": plan.as_json(), "basis": basis},
            estimated=True,
        )

    def charge_cut(self, plan: bounds.CallPlan, cut: CutCall) -> None:
        """A call cut before it was whole was billed all the same (docs/decisions/0006-streaming.md):
        charged the usage the provider reported before the cut, else an estimate that never
        undercounts: the input bound, and the output streamed, or the whole cap when the cut was ours
        (the provider may have gone on generating). Then: stopped or out of time, the run ends; a
        transient cut is retried as a new call, after a backoff, up to PROVIDER_MAX_RETRIES times."""
        usage = cut.streamed.usage
        if usage is not None:
            self.plan = plan
            call = self.call_of(ModelResponse("", (), usage))
        else:
            output = plan.cap if cut.ours else cut.streamed.output_tokens
            call = self.bound_of(
                plan,
                output_tokens=output,
                basis=f"estimate: the call was cut ({cut.reason}) before its usage",
            )
        self.write_charge(call)  # raises _Stopped when the run was stopped (its ender charged the call)
        message = _redact(cut.message, self.adapter)
        if cut.reason == "stopped":
            raise _Stopped
        if cut.reason == "deadline":
            raise RunTimeout(f"The run exceeded its time limit of {settings.RUN_MAX_SECONDS} s. {message}")
        if not cut.transient:
            raise ProviderPermanentError(message, diagnostics=cut.diagnostics)
        self.transient_in_a_row += 1
        if self.transient_in_a_row > settings.PROVIDER_MAX_RETRIES:
            raise ProviderTransientError(message, diagnostics=cut.diagnostics)
        release_connection()
        self.sleep(backoff_delay(self.transient_in_a_row - 1, None))

    # -- after a response ---------------------------------------------------------------------

    def record_empty(self, response: ModelResponse) -> None:
        """A response with neither text nor tool calls is not an answer (docs/contract.md#the-run-loop,
        rule 7): a transient provider defect. Its usage is charged (ledger and counters; nothing of it
        joins the transcript or the history), then the same request is made again after a backoff, up to
        PROVIDER_MAX_RETRIES times; after that the run fails `provider_error` with provider code
        `empty_response`."""
        self.write_charge(self.call_of(response))
        self.transient_in_a_row += 1
        if self.transient_in_a_row > settings.PROVIDER_MAX_RETRIES:
            raise ProviderTransientError(
                f"The provider answered {self.transient_in_a_row} times with neither text nor a tool call.",
                diagnostics=diagnostics(self.adapter.name, code="empty_response", status=200),
            )
        release_connection()
        self.sleep(backoff_delay(self.transient_in_a_row - 1, None))

    def charge_worst_case(self, plan: bounds.CallPlan, response: ModelResponse) -> None:
        """A response whose usage is missing or cannot be billed from is charged the most the call
        could have cost (never less: nothing is recorded as free by accident), and the run fails
        closed, as a defect of the provider's."""
        call = self.bound_of(
            plan, output_tokens=plan.cap, basis="worst case: the response reported no usable usage"
        )
        self.write_charge(call)
        raise ProviderPermanentError(
            f"The provider's response had no usable usage ({response.defect}); the call was charged its "
            f"worst case, USD {plan.worst}.",
            diagnostics=diagnostics(self.adapter.name, status=200),
        )

    def write_charge(self, call: ledger.Call) -> None:
        """A charged call that adds nothing to the transcript: its ledger entry and the counters
        (with any tool results not yet written), in the step's one statement."""
        if not write_step(step_statement(self.run, self.attempt, self.ancestors, call, 0, self.unwritten)):
            raise _Stopped  # ended meanwhile: whoever ended it charged the call
        self.unwritten, self.answered = [], False
        self.run.steps, self.run.model_calls = self.run.steps + 1, self.run.model_calls + 1
        self.run.cost += call.cost

    def tool_calls_that_fit(self, asked: int) -> int:
        return min(asked, tool_calls_that_fit(self.limits, self.run.tool_calls))

    def record_response(self, response: ModelResponse, *, tool_calls: int, defer: bool = False) -> int:
        """Ledger entry and rollups, counters of this run and its ancestors (with the tool calls
        about to run), and the transcript up to this response, all at once: one statement and one
        round trip (runs.steps.write_step). `defer` (no tool that waits runs next): kept as the
        pending step, written with the next call's opening or in the run's end, counted here already.

        A response that arrives after the run stopped being ours (the reaper failed it while the
        worker was frozen, or it was cancelled) was charged by whoever ended the run: the call's
        bound, when it took the run's open call (runs.steps.charge_open_call). Nothing of it is
        written, and the loop stops."""
        call = self.call_of(response)
        cost = call.cost
        if cost > self.plan.worst:
            # A provider that ignored the output cap, counted more tokens than the request had
            # bytes, or charged above the catalogue and margin: its bill is still the truth.
            logger.warning(
                "run %s: the provider billed more than the call's bound (USD %s > %s)",
                self.run.pk,
                cost,
                self.plan.worst,
            )
        step = self.run.steps + 1
        row, message = self.entry(
            TranscriptEntry.Role.ASSISTANT, step, response.text, tool_calls=response.tool_calls
        )
        rows = [*self.unwritten, row]
        self.unwritten = []
        if defer:
            self.pending = _Step(call, tool_calls, rows)
        elif write_step(step_statement(self.run, self.attempt, self.ancestors, call, tool_calls, rows)):
            self.answered = False
        else:
            raise _Stopped  # ended meanwhile: whoever ended it charged the call
        self.history.append(message)
        self.run.steps, self.run.model_calls, self.run.cost = (
            step,
            self.run.model_calls + 1,
            self.run.cost + cost,
        )
        self.run.tool_calls += tool_calls
        return step

    def write_pending(self, opening: Opening) -> bool:
        """The pending step, with the tool results since, and the next call's `opening`."""
        written = write_step(self.take_pending(opening))
        self.answered = False  # written, or the run is not ours: its ender charged the call
        return written

    def take_pending(self, opening: Opening | None = None) -> Step:
        """The pending step, with the tool results since, as its statement (runs.steps)."""
        pending, self.pending = self.pending, None
        assert pending is not None
        rows = [*pending.rows, *self.unwritten]
        self.unwritten = []
        return step_statement(
            self.run, self.attempt, self.ancestors, pending.call, pending.tool_calls, rows, opening=opening
        )

    def flush(self) -> Step | None:
        """In the run's end (callers hold its transaction): the pending step, as the statement the
        end sends before its own, in one round trip (services.finish_run), so the last step and the
        end commit together; otherwise the transcript entries not yet written, written."""
        if self.pending is not None:
            return self.take_pending()
        self.write_transcript()
        return None

    def all_instant(self, calls: tuple[ToolCall, ...]) -> bool:
        """Whether each of these calls answers at once: an instant tool, or one that is refused."""
        by_name = {tool.wire_name: tool for tool in self.tools}
        return all(by_name[c.name].instant if c.name in by_name else True for c in calls)

    def call_fields(self) -> dict[str, Any]:
        agent = self.run.agent
        return {
            "owner_id": self.run.owner_id,
            "run_id": self.run.pk,
            "schedule_id": self.schedule_id,
            "step": self.run.steps + 1,
            "provider": agent.provider,
            "model": agent.model,
            "at": timezone.now(),
        }

    def call_of(self, response: ModelResponse) -> ledger.Call:
        """The ledger entry of a response: its tokens by kind and what the provider bills for them."""
        usage = response.usage
        assert usage is not None  # a response without usage is charged its worst case instead
        billed = bounds.bill(self.sheet, usage)
        return ledger.Call(
            **self.call_fields(),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_5m_tokens=usage.cache_write_5m_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cost=billed.cost,
            computed_cost=billed.computed,
            reported_cost=billed.reported,
            charged_by_kind=billed.by_kind,
            prices={**self.sheet.recorded, "bound": self.plan.as_json()},
        )

    def run_tools(self, calls: tuple[ToolCall, ...], step: int, *, runnable: int) -> None:
        """Run the first `runnable` calls (already counted); the rest get an error result that
        says the budget is spent. The results join the history at once and are written with the
        next step's usage (or the run's end): a commit per step, not per tool call."""
        for index, call in enumerate(calls):
            if index < runnable:
                self.check_time()  # tools can be slow (a fetch, a delegated child)
                if self.pending is None:  # nothing is waited on when every tool answers at once
                    release_connection()
                result, is_error = invoke(call, self.tools, self.context)
            else:
                result, is_error = transcript.TOOL_BUDGET_EXHAUSTED, True
            self.add(self.entry(TranscriptEntry.Role.TOOL, step, result, call=call, is_error=is_error))

    def add(self, entry: tuple[TranscriptEntry, Message]) -> None:
        row, message = entry
        self.unwritten.append(row)
        self.history.append(message)

    def entry(self, role: str, step: int, content: str, **about: Any) -> tuple[TranscriptEntry, Message]:
        """The next transcript entry (transcript.entry: its tool calls, the call it answers)."""
        found = transcript.entry(self.run, self.seq, role, step, content, **about)
        self.seq += 1
        return found

    def write_transcript(self) -> None:
        """Write the transcript entries not yet written (callers hold a transaction)."""
        if len(self.unwritten) == 1:
            self.unwritten[0].save(force_insert=True)  # bulk_create would open a transaction of its own
        elif self.unwritten:
            TranscriptEntry.objects.bulk_create(self.unwritten)
        self.unwritten = []

    # -- delegation: its own step kind (runs.delegation) ----------------------------------------

    def delegate(self, *, task: str, agent_name: str | None) -> Run:
        return delegation.delegate(
            self.run, self.limits, self.client, self.drive_child, task=task, agent_name=agent_name
        )

    def drive_child(self, child: Run, client: httpx.Client) -> Run:
        """A delegated child, by this same loop, ending no later than this run must. Its usage
        counts against this run too (runs.steps wrote it to both rows): the next call is planned
        from counters read again."""
        finished = execute_run(
            child,
            client=client,
            sleep=self.sleep,
            heartbeat=False,
            deadline=self.deadline,
            tools_http=self.tools_http,
        )
        self.run.refresh_from_db(fields=["steps", "model_calls", "tool_calls", "cost"])
        return finished


def execute_run(
    run: Run,
    *,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    heartbeat: bool = True,
    deadline: float | None = None,
    tools_http: httpx.Client | None = None,
) -> Run:
    """Drive a claimed (running) run to its terminal state and return it refreshed.

    Never raises for a run's own failures: they become its recorded failure. Our own bugs are
    recorded as `internal_error`. Idempotent on a run that is no longer this attempt's.
    A given `client` also serves the tools (tests hand one transport for everything); otherwise
    the provider and the tools get clients of their own.
    """
    attempt = run.attempt
    own_clients: list[httpx.Client] = []
    if client is None:
        client = client_for(run.agent)
        own_clients.append(client)
        if tools_http is None:
            tools_http = outbound.client(timeout=settings.HTTP_FETCH_TIMEOUT_SECONDS)
            own_clients.append(tools_http)
    active_client = client
    outcome: Outcome | None
    loop: _Loop | None = None
    try:
        with services.keep_alive(attempt if heartbeat else None):
            loop = _Loop(run, active_client, tools_http or active_client, sleep, deadline)
            outcome = loop.drive()
    except _Stopped:
        outcome = None
    except RunFailure as failure:
        outcome = Outcome(status=Run.Status.FAILED, failure=failure)
    except _DATABASE_GONE:
        raise  # this worker can vouch for nothing more, as a lost one cannot: the reaper ends the run
    except Exception as exc:
        logger.exception("run %s failed with an internal error", run.pk)
        outcome = Outcome(
            status=Run.Status.FAILED,
            failure=InternalError(f"Internal error ({type(exc).__name__}); see the logs."),
        )
    finally:
        for own in own_clients:
            own.close()
    try:
        with transaction.atomic():  # the last step, tool results and the run's end, together
            step = loop.flush() if loop is not None else None
            # Not ours any more (outcome None): whoever ended it charged the pending step's call.
            finished = outcome is not None and services.finish_run(
                run,
                outcome,
                attempt=attempt,
                step=step,
                charge_open=loop is not None and loop.answered and step is None,
            )
    except Exception as exc:
        if outcome is None or loop is None or not loop.answered or isinstance(exc, _DATABASE_GONE):
            # Not ours to end; or every call is charged, and nothing of the end was written; or the
            # database is gone (restarted, unreachable): this worker can vouch for nothing more, as
            # a lost one cannot, and the reaper ends the run and charges its open call.
            raise
        # The database refused the last step: the run ends all the same, its answered call charged
        # its bound.
        logger.exception("run %s: its last step could not be written", run.pk)
        error = InternalError(f"Internal error ({type(exc).__name__}); see the logs.")
        outcome = Outcome(status=Run.Status.FAILED, failure=error)
        finished = services.finish_run(run, outcome, attempt=attempt, charge_open=True)
    # finish_run refreshes the run it finished; otherwise someone else wrote its end.
    if not finished:
        run.refresh_from_db()
    return run


# The database itself failed (its connection lost, the server restarting or shutting down), as
# opposed to refusing what was written: the run is left in flight, for the reaper to end.
_DATABASE_GONE = (OperationalError, InterfaceError)


def release_connection() -> None:
    """Give this thread's database connection back to the pool before a wait on a provider or a tool, so
    the runs in flight share a few connections (docs/decisions/0005-runs-in-flight.md); the next read
    takes one again. Inside a transaction (a caller's, a test's) it is kept."""
    if not connection.in_atomic_block:
        connection.close()


def _read_state(run: Run) -> bool:
    """Refresh the run's status, attempt and counters (RUN_STATE); False if it is gone. A fixed
    statement whose values psycopg already types (UUID, Decimal), not a queryset built each time."""
    with connection.cursor() as cursor:
        cursor.execute(_STATE_SQL, [run.pk])
        row = cursor.fetchone()
    if row is None:
        return False
    for name, value in zip(RUN_STATE, row, strict=True):
        setattr(run, name, value)
    return True


def _ancestor_ids(run: Run) -> list[int]:
    ids: list[int] = []
    parent_id = run.parent_id
    while parent_id is not None:
        ids.append(parent_id)
        parent_id = Run.objects.filter(pk=parent_id).values_list("parent_id", flat=True).first()
    return ids


def _redact(message: str, adapter: object) -> str:
    """A provider message never carries our API key back into storage."""
    secret = getattr(adapter, "_api_key", "")
    return message.replace(secret, "[redacted]") if secret else message


def _redact_diagnostics(found: Diagnostics, adapter: object) -> Diagnostics:
    """An echoed key can be a short identifier too: such a code or parameter is dropped."""
    secret = getattr(adapter, "_api_key", "")
    if not secret:
        return found
    return dataclasses.replace(
        found,
        provider_code="" if secret in found.provider_code else found.provider_code,
        provider_parameter="" if secret in found.provider_parameter else found.provider_parameter,
    )
