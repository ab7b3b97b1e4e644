"""Dollars as the provider bills them (docs/contract.md#dollars-as-billed).

Each case of tests/runs/usage_cases.py is a real response body with the bill its provider charges
for it (bodies and prices cited there). Every case runs through the real adapter, priced from the
catalogue as a production agent with no prices of its own would be, and the ledger must equal the
bill computed two more ways: by hand here from the provider's published formula, and by
`genai-prices`' own `calc_price`.
"""

from __future__ import annotations

import json
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import genai_prices
import httpx
import pytest
from django.conf import settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounting.models import LedgerEntry, Reservation
from runs import pricing
from runs.models import DEFAULT_MAX_OUTPUT_TOKENS, Agent, TranscriptEntry
from tests.factories import limits, make_agent
from tests.runs.usage_cases import CASES, DEFECTS, UsageCase
from tests.runs.wire import ANTHROPIC, OPENAI, WIRES, Provider, Wire, execute, ledger_total, text_bytes

pytestmark = pytest.mark.django_db

MILLION = Decimal(1_000_000)
GENAI_PROVIDER = {"openai": "openai", "anthropic": "anthropic"}


def _catalogue_agent(case: UsageCase) -> Agent:
    return make_agent(provider=case.wire, model=case.model, base_url=case.base_url, prices={})


def _by_hand(case: UsageCase) -> Decimal:
    """The provider's published formula over the body's own fields (the conventions are cited at
    the top of usage_cases.py): OpenAI's prompt_tokens include the cached ones and its
    completion_tokens the reasoning; Anthropic's four input counts are disjoint."""
    usage, price = case.body["usage"], case.prices_per_mtok
    if "cost" in usage:  # OpenRouter says what it charged
        return Decimal(str(usage["cost"]))
    if case.wire == "openai":
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        micro = (
            (usage["prompt_tokens"] - cached) * price["input"]
            + cached * price["cache_read"]
            + usage["completion_tokens"] * price["output"]
        )
    else:
        lifetimes = usage["cache_creation"]
        micro = (
            usage["input_tokens"] * price["input"]
            + lifetimes["ephemeral_5m_input_tokens"] * price["cache_write_5m"]
            + lifetimes["ephemeral_1h_input_tokens"] * price["cache_write_1h"]
            + usage["cache_read_input_tokens"] * price["cache_read"]
            + usage["output_tokens"] * price["output"]
        )
    return micro / MILLION


def _by_genai_prices(case: UsageCase) -> Decimal:
    """genai-prices' calc_price, which counts input_tokens as all input (cache reads and writes
    included) and cache_write_tokens as all writes, 1-hour ones apart as well."""
    usage = case.body["usage"]
    if case.wire == "openai":
        counts = {
            "input_tokens": usage["prompt_tokens"],
            "cache_read_tokens": usage["prompt_tokens_details"]["cached_tokens"],
            "output_tokens": usage["completion_tokens"],
        }
    else:
        lifetimes = usage["cache_creation"]
        written = usage["cache_creation_input_tokens"]
        counts = {
            "input_tokens": usage["input_tokens"] + written + usage["cache_read_input_tokens"],
            "cache_read_tokens": usage["cache_read_input_tokens"],
            "cache_write_tokens": written,
            "cache_write_1h_tokens": lifetimes["ephemeral_1h_input_tokens"],
            "output_tokens": usage["output_tokens"],
        }
    provider = "openrouter" if case.base_url else GENAI_PROVIDER[case.wire]
    found = genai_prices.calc_price(genai_prices.Usage(**counts), case.model, provider_id=provider)
    return Decimal(found.total_price)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_ledger_equals_the_providers_bill(owner, case):
    provider = Provider(case.body)

    run = execute(owner, _catalogue_agent(case), provider, limits=limits(max_cost="5.00"))

    assert run.status == "completed", run.failure_message
    [entry] = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.cost == case.bill  # to the micro-dollar, so to the cent
    assert _by_hand(case) == case.bill
    assert _by_genai_prices(case) == case.bill
    assert run.cost == case.bill
    assert entry.prices["source"].startswith(pricing.catalogue_version())
    assert sum(Decimal(v) for v in entry.charged_by_kind.values()) == entry.cost


def test_the_tokens_are_recorded_by_kind(owner):
    one_hour = next(case for case in CASES if "1-hour" in case.name)
    reasoning = next(case for case in CASES if "reasoning" in case.name)

    run = execute(owner, _catalogue_agent(one_hour), Provider(one_hour.body))
    other = execute(owner, _catalogue_agent(reasoning), Provider(reasoning.body))

    [anthropic] = LedgerEntry.objects.filter(run_id=run.pk)
    [openai] = LedgerEntry.objects.filter(run_id=other.pk)
    assert (
        anthropic.input_tokens,
        anthropic.uncached_input_tokens,
        anthropic.cache_read_tokens,
        anthropic.cache_write_5m_tokens,
        anthropic.cache_write_1h_tokens,
        anthropic.output_tokens,
    ) == (26_500, 500, 20_000, 0, 6_000, 700)
    assert (openai.input_tokens, openai.output_tokens, openai.reasoning_tokens) == (2_000, 3_000, 2_500)
    assert {k: Decimal(v) for k, v in anthropic.charged_by_kind.items() if Decimal(v)} == {
        "input": Decimal("0.0015"),
        "cache_write_1h": Decimal("0.036"),
        "cache_read": Decimal("0.006"),
        "output": Decimal("0.0105"),
    }


def test_the_long_context_tier_prices_the_whole_request(owner):
    """Above 200K input tokens Anthropic bills every token of the request at the tier's rates;
    one token under, the base rates."""
    tier = next(case for case in CASES if "long-context" in case.name)
    under = json.loads(json.dumps(tier.body))
    under["usage"]["input_tokens"] = 200_000

    above = execute(owner, _catalogue_agent(tier), Provider(tier.body))
    below = execute(owner, _catalogue_agent(tier), Provider(under))

    assert ledger_total(above) == Decimal("1.845")  # 300000 x 6 + 2000 x 22.50
    assert ledger_total(below) == Decimal("0.63")  # 200000 x 3 + 2000 x 15


# -- the provider's reported charge ---------------------------------------------------------------


def _openrouter_body(cost: float) -> dict[str, Any]:
    case = next(case for case in CASES if case.base_url)
    body = json.loads(json.dumps(case.body))
    body["usage"]["cost"] = cost
    return body


@pytest.mark.parametrize(
    ("reported", "differs"), [(0.00844, False), (0.008480, False), (0.0092, True), (0.0071, True)]
)
def test_the_reported_charge_wins_and_ours_is_kept_beside_it(owner, reported, differs):
    case = next(case for case in CASES if case.base_url)

    run = execute(owner, _catalogue_agent(case), Provider(_openrouter_body(reported)))

    [entry] = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.cost == entry.reported_cost == Decimal(str(reported))
    assert entry.computed_cost == Decimal("0.00844")  # (3200 - 2048) x 2.50 + 2048 x 1.25 + 300 x 10
    assert entry.reported_differs is differs


def test_admins_see_the_calls_whose_reported_charge_differs_by_more_than_one_percent(owner, admin_client):
    case = next(case for case in CASES if case.base_url)
    agreeing = execute(owner, _catalogue_agent(case), Provider(_openrouter_body(0.00844)))
    dearer = execute(owner, _catalogue_agent(case), Provider(_openrouter_body(0.0092)))
    plain = execute(owner, _catalogue_agent(CASES[0]), Provider(CASES[0].body))

    page = admin_client.get("/admin/accounting/ledgerentry/", {"reported": "differs"})
    every = admin_client.get("/admin/accounting/ledgerentry/")

    assert page.status_code == 200
    listed = {entry.run_id for entry in page.context["cl"].result_list}
    assert listed == {dearer.pk}
    assert "differs by more than 1 %" in page.text and "USD 0.00844" in page.text
    assert {entry.run_id for entry in every.context["cl"].result_list} == {agreeing.pk, dearer.pk, plain.pk}
    assert "reported (ours agrees)" in every.text and "computed" in every.text


# -- usage that cannot be billed from ---------------------------------------------------------------


@pytest.mark.parametrize(("name", "wire", "body", "source"), DEFECTS, ids=[d[0] for d in DEFECTS])
def test_usage_that_cannot_be_billed_is_charged_the_worst_case_and_fails_the_run(
    owner, name, wire, body, source
):
    agent = make_agent(
        provider=wire,
        model=("openai/gpt-4o" if "openrouter" in name else "gpt-4o")
        if wire == "openai"
        else "claude-sonnet-4-5",
        prices={},
        base_url="https://openrouter.ai/api/v1" if "openrouter" in name else "",
    )
    provider = Provider(body)

    run = execute(owner, agent, provider, limits=limits(max_cost="5.00"))

    assert (run.status, run.failure_reason, run.error_class) == (
        "failed",
        "provider_error",
        "ProviderPermanentError",
    )
    assert len(provider.requests) == 1  # a defect is not retried: it would be charged again
    [entry] = LedgerEntry.objects.filter(run_id=run.pk)
    sent = json.loads(provider.requests[0].content)
    bound = entry.prices["bound"]
    assert entry.cost == Decimal(bound["worst"]) > 0  # never free, never negative
    assert entry.prices["basis"].startswith("worst case")
    assert entry.output_tokens == bound["output_cap"] == OPENAI.output_cap(sent)
    assert entry.input_tokens == bound["input_tokens"] >= text_bytes(sent)
    assert entry.cost <= Decimal("5.00") and run.cost == entry.cost
    assert "no usable usage" in run.failure_message


# -- bounded before the call --------------------------------------------------------------------------


def _expected_cap(
    max_cost: Decimal, spent: Decimal, input_bound: int, input_rate: str, output_rate: str
) -> int:
    """The contract's cap (docs/contract.md#bounded-before-the-call), by its words: the dollars remaining
    (less the micro-dollar a charge may round up by), less the input bound at the dearest input rate,
    paid in output tokens; at most the model's MAX_OUTPUT_TOKENS."""
    left = max_cost - spent - Decimal("0.000001") - Decimal(input_bound) * Decimal(input_rate) / MILLION
    by_dollars = int((left * MILLION / Decimal(output_rate)).to_integral_value(rounding=ROUND_FLOOR))
    return min(by_dollars, DEFAULT_MAX_OUTPUT_TOKENS)


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_the_last_affordable_call_is_capped_so_the_run_cannot_cross_its_cost_limit(owner, wire):
    """A run of USD 0.08 at USD 3 / 15 per million tokens: the first call's worst case fits whole
    and it writes 4,000 tokens (USD 0.0627); the second gets an output cap the dollars left pay for,
    the provider honours it and stops there, and the run ends budget_exhausted on cost with what
    it wrote kept. The bill stays under the limit even if the provider bills the whole bound."""
    max_cost = Decimal("0.08")
    agent = make_agent(provider=wire.provider, model=wire.model, input_price="3.00", output_price="15.00")

    def model(request: httpx.Request) -> dict[str, Any]:
        body = json.loads(request.content)
        cap = wire.output_cap(body)
        if len(wire.conversation(body)) == 1:
            return wire.tools(("clock_now", {}), usage=(900, 4000))
        # The worst a provider could bill within the bound: every byte a token, the whole cap.
        return wire.cut("The three things that happened today were", usage=(text_bytes(body), cap))

    provider = Provider(model)
    run = execute(owner, agent, provider, limits=limits(max_cost=str(max_cost)))

    first, second = LedgerEntry.objects.filter(run_id=run.pk).order_by("id")
    sent = [wire.output_cap(body) for body in provider.bodies]
    assert sent[0] == DEFAULT_MAX_OUTPUT_TOKENS  # the first call's worst case fits whole
    expected = _expected_cap(max_cost, first.cost, second.prices["bound"]["input_tokens"], "3", "15")
    assert sent[1] == second.prices["bound"]["output_cap"] == expected < DEFAULT_MAX_OUTPUT_TOKENS
    assert second.prices["bound"]["input_tokens"] >= text_bytes(provider.bodies[1])  # a true bound
    assert (run.status, run.failure_reason, run.failure_dimension) == ("failed", "budget_exhausted", "cost")
    assert ledger_total(run) <= max_cost
    assert ledger_total(run) > max_cost * Decimal("0.95")  # the cap let it spend nearly all of it
    kept = TranscriptEntry.objects.filter(run=run, role="assistant").order_by("-id").first()
    assert kept is not None and kept.content.startswith("The three things")
    assert ledger_total(run) <= Reservation.objects.get(run_id=run.pk).amount


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_below_the_floor_no_call_is_made(owner, wire):
    """After the first call the dollars left cannot pay for MIN_OUTPUT_TOKENS of output on top of
    the input: the second call is never sent."""
    agent = make_agent(provider=wire.provider, model=wire.model, input_price="3.00", output_price="15.00")
    provider = Provider(wire.tools(("clock_now", {}), usage=(900, 400)))

    run = execute(owner, agent, provider, limits=limits(max_cost="0.01"))

    assert len(provider.requests) == 1
    assert (run.status, run.failure_reason, run.failure_dimension) == ("failed", "budget_exhausted", "cost")
    assert f"{settings.MIN_OUTPUT_TOKENS} output tokens" in run.failure_message
    assert ledger_total(run) == Decimal("0.0087")  # 900 x 3 + 400 x 15: USD 0.0013 left


def test_the_cap_goes_on_the_wire_in_each_providers_field(owner):
    agents = {
        "openai": make_agent(provider="openai", model="gpt-4o", prices={}),
        "self-hosted": make_agent(provider="openai", model="llama", base_url="http://10.0.0.5:8000/v1"),
        "anthropic": make_agent(provider="anthropic", model="claude-sonnet-4-5", prices={}),
    }
    fields = {}
    for name, agent in agents.items():
        provider = Provider(
            lambda request: (ANTHROPIC if "anthropic" in request.url.host else OPENAI).answer(usage=(10, 5)),
            web=lambda request: httpx.Response(200, json=OPENAI.answer(usage=(10, 5))),
        )
        execute(owner, agent, provider, limits=limits(max_cost="0.01"))
        request = (provider.requests or provider.fetches)[0]
        body = json.loads(request.content)
        fields[name] = {key: body[key] for key in ("max_tokens", "max_completion_tokens") if key in body}
    # USD 0.01 less the prompt's input bound, at 10 / 15 / 15 per million output tokens
    assert set(fields["openai"]) == {"max_completion_tokens"}
    assert set(fields["self-hosted"]) == {"max_tokens"}  # what vLLM, Ollama and LiteLLM read
    assert set(fields["anthropic"]) == {"max_tokens"}
    assert all(0 < next(iter(f.values())) < DEFAULT_MAX_OUTPUT_TOKENS for f in fields.values())


# -- the invariant, for any prices, usage and limits -----------------------------------------------


prices_per_kind = st.fixed_dictionaries(
    {
        "input": st.decimals(Decimal("0.01"), Decimal("80"), places=2),
        "cache_read": st.decimals(Decimal("0"), Decimal("80"), places=3),
        "cache_write_5m": st.decimals(Decimal("0"), Decimal("120"), places=3),
        "cache_write_1h": st.decimals(Decimal("0"), Decimal("160"), places=3),
        "output": st.decimals(Decimal("0.01"), Decimal("600"), places=2),
    }
)
usage_shares = st.tuples(
    st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.integers(0, 3)
)


def _usage_body(
    wire: Wire, body: dict[str, Any], shares: tuple[float, ...], want: int, *, tokens_per_byte: float
) -> dict[str, Any]:
    """A response whose usage a real provider could send for this request: input the run's own
    tokens per byte of its text (a tokenizer counts a longer prompt as the shorter one plus at
    most a token per added byte, never as a fresh draw), split at random into uncached, cache
    reads and writes; output no more than its cap, part of it reasoning; it asks for `want` tool
    calls, or answers when told to or cut short."""
    _, read, write, one_hour, output_share, _ = shares
    total = int(text_bytes(body) * tokens_per_byte)
    reads = int(total * read)
    writes = int((total - reads) * write)
    hour = int(writes * one_hour) if wire is ANTHROPIC else 0
    cap = wire.output_cap(body)
    output = int(cap * output_share)
    if output == cap:
        response = wire.cut("Cut here", usage=(total, output))
    elif want == 0 or wire.is_synthesis_only(body):
        response = wire.answer(usage=(total, output))
    else:
        response = wire.tools(*[("clock_now", {})] * want, usage=(total, output))
    usage = response["usage"]
    if wire is ANTHROPIC:
        usage.update(
            input_tokens=total - reads - writes,
            cache_read_input_tokens=reads,
            cache_creation_input_tokens=writes,
            cache_creation={"ephemeral_5m_input_tokens": writes - hour, "ephemeral_1h_input_tokens": hour},
        )
    else:
        usage["prompt_tokens_details"]["cached_tokens"] = reads
        usage["completion_tokens_details"]["reasoning_tokens"] = output // 2
    return response


@hypothesis_settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    wire=st.sampled_from(WIRES),
    prices=prices_per_kind,
    max_cost=st.decimals(Decimal("0.01"), Decimal("0.50"), places=2),
    reserve=st.sampled_from(["0", "0.01", "0.02"]),
    script=st.lists(usage_shares, min_size=1, max_size=8),
)
def test_for_any_prices_usage_and_limits_the_ledger_stays_within_the_cost_limit(
    owner, wire, prices, max_cost, reserve, script
):
    kinds = pricing.PROVIDER_KINDS[wire.provider]
    agent = make_agent(
        provider=wire.provider, model=wire.model, prices={k: str(v) for k, v in prices.items() if k in kinds}
    )
    replies = iter(script)

    def model(request: httpx.Request) -> dict[str, Any]:
        shares = next(replies, script[-1])
        body = json.loads(request.content)
        return _usage_body(wire, body, shares, want=shares[-1], tokens_per_byte=script[0][0])

    run = execute(
        owner,
        agent,
        Provider(model),
        limits=limits(
            max_cost=str(max_cost), synthesis_reserve_cost=reserve if Decimal(reserve) < max_cost else "0"
        ),
    )

    total = ledger_total(run)
    assert total <= max_cost, (run.status, run.failure_message)
    assert total <= Reservation.objects.get(run_id=run.pk).amount
    assert run.cost == total
    for entry in LedgerEntry.objects.filter(run_id=run.pk):
        assert entry.cost <= Decimal(entry.prices["bound"]["worst"])
        assert entry.cost == entry.computed_cost >= 0


# -- prices an agent can be saved with ----------------------------------------------------------


def _agent_form(agent: Agent, **changes: str) -> dict[str, str]:
    return {
        "name": agent.name,
        "provider": agent.provider,
        "model": agent.model,
        "base_url": agent.base_url,
        "tools": "[]",
        "default_limits": limits().model_dump_json(),
        "history_turns": "20",
        "history_tokens": "12000",
        "max_output_tokens": str(agent.max_output_tokens),
        "is_active": "on",
        "credential_changes-TOTAL_FORMS": "0",
        "credential_changes-INITIAL_FORMS": "0",
        **changes,
    }


@pytest.mark.parametrize(
    ("provider", "model", "changes", "error"),
    [
        ("openai", "gpt-4o", {"price_input": "-1", "price_output": "10"}, "without a sign"),
        ("openai", "gpt-4o", {"price_input": "10000.01", "price_output": "10"}, "at most"),
        ("openai", "gpt-4o", {"price_input": "1.1234567", "price_output": "10"}, "6 decimal"),
        (
            "openai",
            "gpt-4o",
            {"price_input": "1", "price_output": "2", "price_cache_write_1h": "4"},
            "does not bill",
        ),
        ("openai", "my-finetune", {}, "No price for model &#x27;my-finetune&#x27;"),
        ("anthropic", "claude-sonnet-4-5", {"price_cache_read": "0.30"}, "give input and output"),
    ],
    ids=["negative", "above 10,000", "7 decimals", "a kind openai does not bill", "unknown model", "half"],
)
def test_an_agent_with_prices_it_cannot_be_charged_at_is_refused_with_a_field_error(
    admin_client, provider, model, changes, error
):
    agent = make_agent(
        provider=provider, model="gpt-4o" if provider == "openai" else "claude-sonnet-4-5", prices={}
    )
    body = _agent_form(agent, provider=provider, model=model, **changes)

    response = admin_client.post(f"/admin/runs/agent/{agent.pk}/change/", body)

    assert response.status_code == 200, "a field error, never a 500"
    assert error in response.text, response.text[:2000]
    assert response.context["adminform"].form.errors
    agent.refresh_from_db()
    assert (agent.model, agent.prices) == (
        "gpt-4o" if provider == "openai" else "claude-sonnet-4-5",
        {},
    )


def test_an_unknown_model_with_its_own_prices_saves_and_a_retired_agent_needs_none(admin_client):
    agent = make_agent(provider="openai", model="gpt-4o", prices={})

    priced = admin_client.post(
        f"/admin/runs/agent/{agent.pk}/change/",
        _agent_form(agent, model="my-finetune", price_input="0.40", price_output="1.60"),
    )
    agent.refresh_from_db()
    assert priced.status_code == 302 and agent.prices == {"input": "0.40", "output": "1.60"}

    retired = _agent_form(agent, model="another-finetune")
    del retired["is_active"]
    assert admin_client.post(f"/admin/runs/agent/{agent.pk}/change/", retired).status_code == 302


def test_the_catalogue_never_fetches_prices_at_run_time(owner):
    """genai-prices can download newer data; the product reads only the data the package ships,
    so spend never depends on the network or on when a process started."""
    from genai_prices import data_snapshot

    execute(owner, _catalogue_agent(CASES[0]), Provider(CASES[0].body))

    assert data_snapshot._custom_snapshot is None  # no update was installed
    assert pricing.catalogue_sheet("openai", "", "gpt-4o") is not None


def test_a_ledger_entry_keeps_the_prices_it_was_charged_at(owner):
    agent = make_agent(provider="openai", model="gpt-4o", input_price="2.00", output_price="8.00")
    run = execute(owner, agent, Provider(CASES[0].body))
    Agent.objects.filter(pk=agent.pk).update(prices={"input": "20.00", "output": "80.00"})

    [entry] = LedgerEntry.objects.filter(run_id=run.pk)
    assert entry.prices["source"] == pricing.OVERRIDE
    assert entry.prices["per_mtok"]["input"] == "2.00" and entry.prices["per_mtok"]["cache_read"] == "2.00"
    # (10000 - 9000) x 2 + 9000 x 2 (no cache price of its own: the input price) + 500 x 8
    assert entry.cost == Decimal("0.024")


def test_the_migration_keeps_every_agents_two_prices_as_its_own(django_db_blocker):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    with django_db_blocker.unblock():
        executor = MigrationExecutor(connection)
        before = [("runs", "0005_conversation_agent_changes")]
        latest = executor.loader.graph.leaf_nodes()  # every app: going back unapplies those built on runs
        try:
            executor.migrate(before)
            old = executor.loader.project_state(before).apps.get_model("runs", "Agent")
            made = old.objects.create(
                name="old-prices",
                provider="openai",
                model="gpt-4o",
                input_price_per_mtok=Decimal("2.5"),
                output_price_per_mtok=Decimal("0.000125"),
                tools=[],
                default_limits=limits().to_json(),
            )
            executor = MigrationExecutor(connection)
            executor.migrate(latest)
            kept = Agent.objects.get(pk=made.pk)
            assert kept.prices == {"input": "2.50", "output": "0.000125"}
            assert kept.price_sheet().base.output == Decimal("0.000125")
        finally:
            Agent.objects.filter(name="old-prices").delete()
            MigrationExecutor(connection).migrate(latest)


# -- the owner sees the month by model and kind ------------------------------------------------------


def test_the_budget_shows_this_months_spend_by_model_and_kind(owner, owner_client):
    from tests.api.conftest import Api, token_for

    for case in CASES[:3]:
        execute(owner, _catalogue_agent(case), Provider(case.body))

    month = Api(token_for(owner, "read")).get("/budget").json()["month"]
    page = owner_client.get("/budget/")

    # 0.01875 + 0.0396 + 0.054
    assert month["cost"] == "0.11235"
    assert {(m["model"], m["cost"]) for m in month["by_model"]} == {
        ("gpt-4o", "0.01875"),
        ("claude-sonnet-4-5", "0.0936"),
    }
    by_kind = {kind: Decimal(amount) for kind, amount in month["cost_by_kind"].items()}
    assert sum(by_kind.values()) == Decimal("0.11235")
    # reads: 9000 x 1.25 + 20000 x 0.30; writes: 8000 x 3.75 + 6000 x 6
    assert by_kind["cache_read"] == Decimal("0.01725") and by_kind["cache_write"] == Decimal("0.066")
    assert month["tokens"]["cache_read"] == 29_000 and month["tokens"]["cache_write_1h"] == 6_000
    assert page.status_code == 200
    assert "This month by model and kind of token" in page.text and "claude-sonnet-4-5" in page.text
    assert "USD 0.066" in page.text or "USD 0.07" in page.text


def test_the_usage_rollups_agree_with_the_ledger_and_check_rollups_says_when_not(owner):
    from django.core.management import CommandError, call_command

    from accounting.models import UsageRollup

    for case in CASES:
        execute(owner, _catalogue_agent(case), Provider(case.body))
    quiet = {"stdout": open("/dev/null", "w")}  # noqa: SIM115

    call_command("check_rollups", **quiet)
    UsageRollup.objects.filter(owner=owner, grain="d", model="gpt-4o").update(cache_read_tokens=1)
    with pytest.raises(CommandError, match="differ from the ledger for 1 owner"):
        call_command("check_rollups", **quiet)
    call_command("check_rollups", "--repair", **quiet)
    call_command("check_rollups", **quiet)
    day = UsageRollup.objects.get(owner=owner, grain="d", model="gpt-4o")
    assert (day.calls, day.cache_read_tokens, day.cost) == (1, 9_000, Decimal("0.01875"))
