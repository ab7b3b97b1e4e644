"""Real provider response bodies, each with the bill the provider charges for it, for ledger tests.

Every body below has the shape the provider documents for a 200 response (its API reference example and its
official SDK's types); token counts are chosen per case, ids follow the documented examples, message texts
are placeholders. Every price is the provider's published price, cited per case, and every `bill` was
computed by hand from the published formula, written out in `working`. Each bill was also checked against
genai-prices 0.2.3 (`calc_price`, which counts input_tokens as the TOTAL input: uncached + cache reads +
cache writes); the figure it gave is noted beside the case, with any disagreement.

Conventions the sources state, and the bills rely on:
- OpenAI: `prompt_tokens` INCLUDES `prompt_tokens_details.cached_tokens` (billed at the cached-input price),
  and `completion_tokens` INCLUDES `completion_tokens_details.reasoning_tokens` (billed as output):
  https://platform.openai.com/docs/guides/prompt-caching , https://platform.openai.com/docs/guides/reasoning
- Anthropic: `input_tokens` EXCLUDES cache reads and cache writes; the three are added, each at its own price
  (5-minute writes 1.25x base input, 1-hour writes 2x, reads 0.1x):
  https://platform.claude.com/docs/en/build-with-claude/prompt-caching#pricing
- OpenRouter: `usage.cost` is what it charged, in credits (1 credit = 1 USD):
  https://openrouter.ai/docs/use-cases/usage-accounting

DEFECTS holds bodies no ledger may bill as they stand (no usage, impossible counts); each names the
documented shape it was derived from and the one thing changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class UsageCase:
    name: str
    wire: str  # "openai" or "anthropic": the adapter that reads it (OpenRouter speaks "openai")
    base_url: str  # "" for the provider's default
    model: str  # the model name as sent
    body: dict[str, Any]  # the complete 200 response body
    body_source: str
    # keys among input, cache_read, cache_write_5m, cache_write_1h, output (long context: the tier's prices)
    prices_per_mtok: dict[str, Decimal]
    price_source: str
    bill: Decimal  # exact, by hand from the published formula
    working: str


OPENROUTER = "https://openrouter.ai/api/v1"

OPENAI_BODY_SOURCE = (
    "https://platform.openai.com/docs/api-reference/chat/object ('The chat completion object' example: "
    "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG, gpt-4o-2024-08-06, service_tier, system_fingerprint); usage "
    "fields per openai/openai-python src/openai/types/completion_usage.py (CompletionUsage, "
    "PromptTokensDetails.cached_tokens/audio_tokens, CompletionTokensDetails.reasoning_tokens/audio_tokens/"
    "accepted_prediction_tokens/rejected_prediction_tokens). Note: the index's upstream copy of that file "
    "(commit 08b8179a) predates the *_details fields; they were read in the Stainless-generated text as "
    "mirrored by the fork LuminaX-alt/openai-python @ 7dcdb900"
)
OPENAI_PRICE_SOURCE = (
    "https://platform.openai.com/docs/pricing (now https://developers.openai.com/api/docs/pricing), "
    "Standard tier, text tokens per 1M"
)
ANTHROPIC_BODY_SOURCE = (
    "https://platform.claude.com/docs/en/api/messages/create ('Response 200' example: "
    "msg_013Zva2CMHLNnXjNJJKqJ2EF, model claude-sonnet-4-5-20250929, usage with cache_creation, "
    "server_tool_use, service_tier 'standard'); usage fields per anthropics/anthropic-sdk-python "
    "src/anthropic/types/usage.py @ 0c20cf40 and src/anthropic/types/cache_creation.py @ d688e036"
)
ANTHROPIC_PRICE_SOURCE = (
    "https://platform.claude.com/docs/en/about-claude/pricing (Model pricing table, row 'Claude Sonnet 4.5': "
    "$3 base input, $3.75 5m cache writes, $6 1h cache writes, $0.30 cache hits, $15 output per MTok); "
    "multipliers 1.25x/2x/0.1x: https://platform.claude.com/docs/en/build-with-claude/prompt-caching#pricing"
)
OPENROUTER_BODY_SOURCE = (
    "https://openrouter.ai/docs/api-reference/overview (response: id, choices[finish_reason, "
    "native_finish_reason, message], created, model, object, system_fingerprint, usage); usage per "
    "https://openrouter.ai/docs/use-cases/usage-accounting (cost, cost_details, prompt_tokens_details."
    "cached_tokens, completion_tokens_details.reasoning_tokens) and "
    "https://openrouter.ai/docs/sdks/python/api-reference/components/chatusage (is_byok, cost_details with "
    "upstream_inference_cost null, upstream_inference_prompt_cost, upstream_inference_completions_cost); "
    "top-level 'provider' as in docs.rs/crate/openrouter/latest/source/src/completions/response.rs"
)


def _chat(
    model: str,
    content: str,
    usage: dict[str, Any] | None,
    *,
    ident: str = "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    fingerprint: str | None = "fp_fc9f1d7035",
) -> dict[str, Any]:
    """An OpenAI chat completion object, field for field as OPENAI_BODY_SOURCE shows it."""
    message = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    return {
        "id": ident,
        "object": "chat.completion",
        "created": 1741570283,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": fingerprint,
    }


def _openai_usage(prompt: int, cached: int, completion: int, reasoning: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _message(
    text: str, usage: dict[str, Any], *, ident: str = "msg_013Zva2CMHLNnXjNJJKqJ2EF"
) -> dict[str, Any]:
    """An Anthropic Messages API response, field for field as ANTHROPIC_BODY_SOURCE shows it."""
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def _anthropic_usage(uncached: int, write_5m: int, write_1h: int, read: int, output: int) -> dict[str, Any]:
    return {
        "cache_creation": {"ephemeral_1h_input_tokens": write_1h, "ephemeral_5m_input_tokens": write_5m},
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": read,
        "input_tokens": uncached,
        "output_tokens": output,
        "server_tool_use": {"web_search_requests": 0},
        "service_tier": "standard",
    }


def _openrouter(usage: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "Here is the summary you asked for.", "refusal": None}
    choice = {"index": 0, "message": message}
    return {
        "id": "gen-1741570283-B9MHDbslfkBeAs8l4beb",
        "provider": "OpenAI",
        "model": "openai/gpt-4o",
        "object": "chat.completion",
        "created": 1741570283,
        "choices": [{"logprobs": None, "finish_reason": "stop", "native_finish_reason": "stop", **choice}],
        "system_fingerprint": "fp_fc9f1d7035",
        "usage": usage,
    }


def _openrouter_usage(cost: float) -> dict[str, Any]:
    return {
        "prompt_tokens": 3200,
        "completion_tokens": 300,
        "total_tokens": 3500,
        "cost": cost,
        "is_byok": False,
        "prompt_tokens_details": {"cached_tokens": 2048, "audio_tokens": 0},
        "cost_details": {
            "upstream_inference_cost": None,
            "upstream_inference_prompt_cost": 0.00544,
            "upstream_inference_completions_cost": 0.003,
        },
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


SONNET_45 = {
    "input": Decimal("3"),
    "cache_write_5m": Decimal("3.75"),
    "cache_write_1h": Decimal("6"),
    "cache_read": Decimal("0.30"),
    "output": Decimal("15"),
}

CASES: list[UsageCase] = [
    # genai-prices 0.2.3: calc_price(Usage(input_tokens=10000, cache_read_tokens=9000, output_tokens=500),
    # "gpt-4o", provider_id="openai") -> 0.01875. Agrees.
    UsageCase(
        name="openai gpt-4o, 90% of the prompt from cache",
        wire="openai",
        base_url="",
        model="gpt-4o",
        body=_chat(
            "gpt-4o-2024-08-06",
            "The image shows a wooden boardwalk path running through a lush green field or meadow.",
            _openai_usage(prompt=10000, cached=9000, completion=500, reasoning=0),
        ),
        body_source=OPENAI_BODY_SOURCE,
        prices_per_mtok={"input": Decimal("2.50"), "cache_read": Decimal("1.25"), "output": Decimal("10.00")},
        price_source=OPENAI_PRICE_SOURCE + ": gpt-4o $2.50 input, $1.25 cached input, $10.00 output",
        bill=Decimal("0.01875"),
        working="(10000-9000)*2.50 + 9000*1.25 + 500*10.00 = 2500 + 11250 + 5000 = 18750 / 1e6 = 0.01875",
    ),
    # genai-prices 0.2.3: Usage(input_tokens=9200, cache_write_tokens=8000, output_tokens=400),
    # "claude-sonnet-4-5", provider_id="anthropic" -> 0.0396. Agrees.
    UsageCase(
        name="anthropic claude-sonnet-4-5, 5-minute cache write",
        wire="anthropic",
        base_url="",
        model="claude-sonnet-4-5",
        body=_message(
            "Hi! My name is Claude.",
            _anthropic_usage(uncached=1200, write_5m=8000, write_1h=0, read=0, output=400),
        ),
        body_source=ANTHROPIC_BODY_SOURCE,
        prices_per_mtok=dict(SONNET_45),
        price_source=ANTHROPIC_PRICE_SOURCE,
        bill=Decimal("0.0396"),
        working="1200*3 + 8000*3.75 + 0*0.30 + 400*15 = 3600 + 30000 + 0 + 6000 = 39600 / 1e6 = 0.0396",
    ),
    # genai-prices 0.2.3: Usage(input_tokens=26500, cache_read_tokens=20000, cache_write_tokens=6000,
    # cache_write_1h_tokens=6000, output_tokens=700), "claude-sonnet-4-5", "anthropic" -> 0.0540. Agrees.
    UsageCase(
        name="anthropic claude-sonnet-4-5, 1-hour cache write plus cache reads",
        wire="anthropic",
        base_url="",
        model="claude-sonnet-4-5",
        body=_message(
            "The contract's termination clause is in section 14.2.",
            _anthropic_usage(uncached=500, write_5m=0, write_1h=6000, read=20000, output=700),
            ident="msg_01XFDUDYJgAACzvnptvVoYEL",
        ),
        body_source=ANTHROPIC_BODY_SOURCE,
        prices_per_mtok=dict(SONNET_45),
        price_source=ANTHROPIC_PRICE_SOURCE,
        bill=Decimal("0.054"),
        working=(
            "500*3 + 6000*6 (1h write) + 20000*0.30 + 700*15 = 1500 + 36000 + 6000 + 10500"
            " = 54000 / 1e6 = 0.054"
        ),
    ),
    # The bill is what OpenRouter reports in usage.cost. It equals the token arithmetic at OpenRouter's listed
    # openai/gpt-4o prices (OpenRouter passes provider prices through): (3200-2048)*2.50 + 2048*1.25 +
    # 300*10 = 8440 / 1e6. genai-prices 0.2.3 for ("openai/gpt-4o", provider_id="openrouter") -> 0.00844,
    # agrees; but its data gives openrouter openai/gpt-4o a cache-read price only from 2026-10-19, so for an
    # earlier request timestamp it prices the cached tokens at full input and says 0.011.
    UsageCase(
        name="openrouter openai/gpt-4o, reporting what it charged",
        wire="openai",
        base_url=OPENROUTER,
        model="openai/gpt-4o",
        body=_openrouter(_openrouter_usage(cost=0.00844)),
        body_source=OPENROUTER_BODY_SOURCE,
        prices_per_mtok={"input": Decimal("2.50"), "cache_read": Decimal("1.25"), "output": Decimal("10")},
        price_source=(
            "usage.cost itself (https://openrouter.ai/docs/use-cases/usage-accounting: 'cost: The total "
            "amount charged to your account', in credits); listed prices: "
            "https://openrouter.ai/openai/gpt-4o ($2.50/M input, $10/M output, cache read $1.25/M)"
        ),
        bill=Decimal("0.00844"),
        working="reported usage.cost = 0.00844; check: (3200-2048)*2.50 + 2048*1.25 + 300*10 = 8440 / 1e6",
    ),
    # Historical: Sonnet 4.5's 1M-context beta (header context-1m-2025-08-07) was retired; today's model page
    # (https://platform.claude.com/docs/en/models/sonnet-4-5/overview) lists a 200K window, so such a request
    # now errors (genai-prices' price_comments say the same, retired 2026-04-30). The bill is what the
    # long-context tier charged while it existed. genai-prices 0.2.3: Usage(input_tokens=300000,
    # output_tokens=2000), "claude-sonnet-4-5", "anthropic" -> 1.845 (tiers start=200000). Agrees.
    UsageCase(
        name="anthropic claude-sonnet-4-5, 300K input: whole request at the long-context tier",
        wire="anthropic",
        base_url="",
        model="claude-sonnet-4-5",
        body=_message(
            "Across the 41 files, the retry policy is implemented three different ways.",
            _anthropic_usage(uncached=300000, write_5m=0, write_1h=0, read=0, output=2000),
            ident="msg_01Aq9w938a90dw8q",
        ),
        body_source=ANTHROPIC_BODY_SOURCE,
        # Cache prices = caching multipliers x the $6 tier input, as genai-prices 0.2.3 has them (7.5/12/0.6);
        # the stored pricing-page copy shows only the input/output cells. Unused here (no cache tokens).
        prices_per_mtok={
            "input": Decimal("6"),
            "cache_write_5m": Decimal("7.50"),
            "cache_write_1h": Decimal("12"),
            "cache_read": Decimal("0.60"),
            "output": Decimal("22.50"),
        },
        price_source=(
            "https://platform.claude.com/docs/en/about-claude/pricing#long-context-pricing (column '> 200K "
            "input tokens': 'Input: $6 / MTok', 'Output: $22.50 / MTok', for the whole request once input "
            "exceeds 200K; stored copy read: https://docs.anthropic.com/en/docs/about-claude/pricing)"
        ),
        bill=Decimal("1.845"),
        working=(
            "300000 > 200000, so all at tier: 300000*6 + 2000*22.50 = 1800000 + 45000 = 1845000 / 1e6 = 1.845"
        ),
    ),
    # genai-prices 0.2.3: Usage(input_tokens=2000, output_tokens=3000), "o4-mini", provider_id="openai"
    # -> 0.0154. Agrees.
    UsageCase(
        name="openai o4-mini, reasoning tokens billed as output",
        wire="openai",
        base_url="",
        model="o4-mini",
        body=_chat(
            "o4-mini-2025-04-16",
            "The answer is 42: the two constraints only meet at n = 42.",
            _openai_usage(prompt=2000, cached=0, completion=3000, reasoning=2500),
            ident="chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            fingerprint=None,
        ),
        body_source=OPENAI_BODY_SOURCE
        + "; reasoning tokens inside completion_tokens, billed as output: "
        + "https://platform.openai.com/docs/guides/reasoning",
        prices_per_mtok={"input": Decimal("1.10"), "cache_read": Decimal("0.275"), "output": Decimal("4.40")},
        price_source=OPENAI_PRICE_SOURCE + ": o4-mini $1.10 input, $0.275 cached input, $4.40 output",
        bill=Decimal("0.0154"),
        working="2000*1.10 + 3000*4.40 (2500 reasoning + 500 visible) = 2200 + 13200 = 15400 / 1e6 = 0.0154",
    ),
]


def _gpt(usage: dict[str, Any] | None) -> dict[str, Any]:
    return _chat("gpt-4o-2024-08-06", "Hello!", usage)


def _good(**changes: Any) -> dict[str, Any]:
    return {**_openai_usage(prompt=10000, cached=9000, completion=500, reasoning=0), **changes}


_NO_USAGE = {k: v for k, v in _gpt(_good()).items() if k != "usage"}

# (name, wire, body, source): each body is a documented shape with one thing made impossible.
DEFECTS: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "openai body with no usage key at all",
        "openai",
        _NO_USAGE,
        OPENAI_BODY_SOURCE + "; usage removed (openai-python ChatCompletion.usage is Optional)",
    ),
    ("openai usage null", "openai", _gpt(None), OPENAI_BODY_SOURCE + "; usage set to null"),
    (
        "openai negative prompt_tokens",
        "openai",
        _gpt(_good(prompt_tokens=-10000)),
        OPENAI_BODY_SOURCE + "; prompt_tokens made negative",
    ),
    (
        "anthropic negative output_tokens",
        "anthropic",
        _message("Hi!", _anthropic_usage(uncached=1200, write_5m=0, write_1h=0, read=0, output=-400)),
        ANTHROPIC_BODY_SOURCE + "; output_tokens made negative",
    ),
    (
        "openai non-integer completion_tokens (12.5)",
        "openai",
        _gpt(_good(completion_tokens=12.5)),
        OPENAI_BODY_SOURCE + "; completion_tokens 12.5 (CompletionUsage declares int)",
    ),
    (
        "anthropic string input_tokens",
        "anthropic",
        _message("Hi!", {**_anthropic_usage(1200, 8000, 0, 0, 400), "input_tokens": "1200"}),
        ANTHROPIC_BODY_SOURCE + "; input_tokens sent as the string '1200' (Usage declares int)",
    ),
    (
        "openai boolean completion_tokens",
        "openai",
        _gpt(_good(completion_tokens=True)),
        OPENAI_BODY_SOURCE + "; completion_tokens true (a JSON boolean, not a count)",
    ),
    (
        "openai cached_tokens larger than prompt_tokens",
        "openai",
        _gpt(_openai_usage(prompt=5136, cached=10192, completion=201, reasoning=0)),
        OPENAI_BODY_SOURCE
        + "; counts as reported (Responses API, input_tokens 5136 < cached_tokens 10192) in "
        "https://community.openai.com/t/how-to-use-cached-tokens-field-to-calculate-cost-estimation/1330187",
    ),
    (
        "anthropic cache_creation breakdown disagreeing with cache_creation_input_tokens",
        "anthropic",
        _message("Hi!", {**_anthropic_usage(1200, 8000, 0, 0, 400), "cache_creation_input_tokens": 3000}),
        ANTHROPIC_BODY_SOURCE + "; cache_creation_input_tokens 3000 but ephemeral_5m_input_tokens 8000",
    ),
    (
        "openai absurd prompt_tokens (10**12)",
        "openai",
        _gpt(_openai_usage(prompt=10**12, cached=0, completion=500, reasoning=0)),
        OPENAI_BODY_SOURCE + "; prompt_tokens 10**12, far beyond gpt-4o's 128K context window",
    ),
    (
        "openrouter negative cost",
        "openai",
        _openrouter(_openrouter_usage(cost=-0.00844)),
        OPENROUTER_BODY_SOURCE + "; usage.cost made negative",
    ),
]
