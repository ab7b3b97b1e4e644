"""What a call costs, as the provider bills it (docs/contract.md#dollars-as-billed).

Providers bill token kinds at different prices: uncached input, input read from the cache, input
written to the cache (Anthropic: for 5 minutes or for an hour), and output (reasoning included).
Some price the whole request higher above a size (Anthropic's long-context tier). A `PriceSheet`
holds one model's prices per kind and its tiers, and computes a call's cost from its tokens by kind.

Where the sheet comes from: the agent's own prices per kind (`Agent.prices`: self-hosted and
unknown models, or a negotiated rate), else the price catalogue of the maintained `genai-prices`
package, whose data ships with it: it is read from the package, never fetched at run time. An
agent with neither cannot run (`NoPrice`), and cannot be saved active. Each ledger entry stores
the sheet it used (`snapshot`), so a later catalogue never changes recorded spend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal
from functools import cached_property, lru_cache
from typing import Any

from accounting.money import PRICE_PLACES, format_money, parse_money
from accounting.tokens import TokensByKind

# Every kind a price can be given for, in the order people read them; reasoning is billed as output.
KINDS = ("input", "cache_read", "cache_write_5m", "cache_write_1h", "output")
KIND_LABELS = {
    "input": "Input",
    "cache_read": "Cached input (read)",
    "cache_write_5m": "Cache write, 5 minutes",
    "cache_write_1h": "Cache write, 1 hour",
    "output": "Output (reasoning included)",
}
# The kinds each wire format can report. OpenAI-compatible APIs report cache reads, and writes
# where a router relays a model that bills them (OpenRouter's prompt_tokens_details
# .cache_write_tokens: one kind, no lifetime); Anthropic bills 5-minute and 1-hour writes apart.
# The simulated provider speaks the OpenAI-compatible format.
PROVIDER_KINDS = {
    "openai": ("input", "cache_read", "cache_write_5m", "output"),
    "simulated": ("input", "cache_read", "cache_write_5m", "output"),
    "anthropic": KINDS,
}
REQUIRED_KINDS = ("input", "output")
MAX_PRICE = Decimal("10000")  # USD per million tokens: no model costs this much
MILLION = Decimal(1_000_000)
MICRO = Decimal("0.000001")  # the ledger's resolution: a charge is rounded up to it, never down
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
OVERRIDE = "agent override"


def catalogue_version() -> str:
    from genai_prices import __version__

    return f"genai-prices {__version__}"


class NoPrice(Exception):
    """Neither the agent nor the catalogue has a price for this model; `message` says what to set."""

    def __init__(self, provider: str, model: str) -> None:
        self.message = (
            f"No price for model {model!r} ({provider}): the price catalogue does not know it, so set "
            "the agent's own prices per million tokens (at least input and output)"
        )
        super().__init__(self.message)


@dataclass(frozen=True)
class Rates:
    """USD per million tokens of each kind, for one request size."""

    input: Decimal
    cache_read: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    output: Decimal

    def of(self, kind: str) -> Decimal:
        return getattr(self, kind)  # type: ignore[no-any-return]

    def as_json(self) -> dict[str, str]:
        return {kind: format_money(self.of(kind)) for kind in KINDS}


@dataclass(frozen=True)
class Charge:
    """A call's cost by kind (USD, exact) and in total (rounded up to the ledger's micro-dollar)."""

    by_kind: dict[str, Decimal]

    @property
    def total(self) -> Decimal:
        return sum(self.by_kind.values(), Decimal(0)).quantize(MICRO, rounding=ROUND_CEILING)


@dataclass(frozen=True)
class PriceSheet:
    """One model's prices: `base`, and `tiers` of (input tokens above which, rates for the whole
    request), ascending; `source` names where they come from."""

    source: str
    base: Rates
    tiers: tuple[tuple[int, Rates], ...] = ()
    reports_cost: bool = False  # the provider reports what it charged (OpenRouter)

    def rates(self, input_tokens: int) -> Rates:
        """The rates a request of this much input (all kinds) is billed at: the highest tier it
        is above, else the base."""
        chosen = self.base
        for threshold, rates in self.tiers:
            if input_tokens > threshold:
                chosen = rates
        return chosen

    def charge(self, usage: TokensByKind) -> Charge:
        rates = self.rates(usage.input_tokens)
        counts = {
            "input": usage.uncached_input_tokens,
            "cache_read": usage.cache_read_tokens,
            "cache_write_5m": usage.cache_write_5m_tokens,
            "cache_write_1h": usage.cache_write_1h_tokens,
            "output": usage.output_tokens,
        }
        return Charge({kind: Decimal(count) * rates.of(kind) / MILLION for kind, count in counts.items()})

    def cost(self, usage: TokensByKind) -> Decimal:
        return self.charge(usage).total

    def worst_input_rate(self, input_bound: int, kinds: tuple[str, ...]) -> Decimal:
        """The highest price any input token of a request of at most `input_bound` input tokens
        could be billed at: the dearest input kind this provider bills, in the highest tier the
        request could reach."""
        reachable = [self.base, *(rates for threshold, rates in self.tiers if input_bound > threshold)]
        input_kinds = [kind for kind in kinds if kind != "output"]
        return max(rates.of(kind) for rates in reachable for kind in input_kinds)

    def worst_output_rate(self, input_bound: int) -> Decimal:
        reachable = [self.base, *(rates for threshold, rates in self.tiers if input_bound > threshold)]
        return max(rates.output for rates in reachable)

    @cached_property
    def recorded(self) -> dict[str, Any]:
        """What the ledger entry records of the prices it used (computed once per sheet)."""
        return {
            "source": self.source,
            "per_mtok": self.base.as_json(),
            "tiers": [{"above": threshold, "per_mtok": rates.as_json()} for threshold, rates in self.tiers],
        }


# -- the agent's own prices ------------------------------------------------------------------------


def parse_prices(provider: str, prices: Any) -> dict[str, Decimal]:
    """An agent's own prices (USD per million tokens by kind), or ValueError naming what is
    wrong: a kind the provider does not bill, a price that is not an amount, negative, above
    USD 10,000 or with more than 6 decimals, or input or output missing when any is given."""
    if prices in (None, "", {}):
        return {}
    if not isinstance(prices, dict):
        raise ValueError(
            'prices must be an object of prices per kind, e.g. {"input": "3.00", "output": "15.00"}'
        )
    allowed = PROVIDER_KINDS.get(provider, KINDS)
    parsed: dict[str, Decimal] = {}
    for kind, value in prices.items():
        if kind not in KINDS:
            raise ValueError(
                f"prices has {str(kind)[:40]!r}, which is not a kind of token: use {', '.join(KINDS)}"
            )
        if kind not in allowed:
            raise ValueError(
                f"prices.{kind}: the {provider} provider does not bill {KIND_LABELS[kind].lower()}"
            )
        amount = parse_money(value, f"prices.{kind}", places=PRICE_PLACES)
        if amount > MAX_PRICE:
            raise ValueError(f"prices.{kind} must be at most USD {MAX_PRICE:,} per million tokens")
        parsed[kind] = amount
    missing = [kind for kind in REQUIRED_KINDS if kind not in parsed]
    if missing:
        raise ValueError(
            f"prices must give {' and '.join(missing)} (USD per million tokens) when any price is given"
        )
    return parsed


def override_sheet(prices: dict[str, Decimal]) -> PriceSheet:
    """The agent's own prices; a kind left out is billed at the input price."""
    values = {kind: prices.get(kind, prices["input"]) for kind in KINDS}
    return PriceSheet(source=OVERRIDE, base=Rates(**values))


# -- the catalogue -------------------------------------------------------------------------------


def _decimal(value: Any) -> Decimal | None:
    return Decimal(value) if isinstance(value, Decimal) else None


def _catalogue_rates(model_price: Any, tier_index: int | None) -> Rates:
    def price(key: str) -> Decimal | None:
        value = getattr(model_price, key, None)
        if value is None:
            return None
        if hasattr(value, "tiers"):  # TieredPrices
            return _decimal(value.base if tier_index is None else value.tiers[tier_index].price)
        return _decimal(value)

    input_price = price("input_mtok")
    output_price = price("output_mtok")
    assert input_price is not None and output_price is not None
    write = price("cache_write_mtok")
    return Rates(
        input=input_price,
        cache_read=price("cache_read_mtok") or input_price,
        cache_write_5m=write if write is not None else input_price,
        cache_write_1h=price("cache_write_1h_mtok") or (write if write is not None else input_price),
        output=output_price,
    )


@lru_cache(maxsize=256)
def _catalogue(provider: str, base_url: str, model: str, day: str) -> PriceSheet | None:
    from genai_prices import data_snapshot

    if provider not in DEFAULT_URLS:
        return None  # the simulated provider's models are ours: they carry their own prices
    snapshot = data_snapshot.get_snapshot()
    try:
        found = snapshot.find_provider(None, None, base_url or DEFAULT_URLS[provider])
    except LookupError:
        return None  # a self-hosted server: its models are priced by the agent
    model_info = found.find_model(model)
    if model_info is None:
        return None
    model_price = model_info.get_prices(datetime.fromisoformat(day).replace(tzinfo=UTC))
    if getattr(model_price, "input_mtok", None) is None or getattr(model_price, "output_mtok", None) is None:
        return None
    thresholds: list[int] = []
    for key in ("input_mtok", "output_mtok"):
        value = getattr(model_price, key)
        if hasattr(value, "tiers"):
            thresholds = [tier.start for tier in value.tiers]
    tiers = tuple((start, _catalogue_rates(model_price, index)) for index, start in enumerate(thresholds))
    return PriceSheet(
        source=f"{catalogue_version()}: {found.id}/{model_info.id}",
        base=_catalogue_rates(model_price, None),
        tiers=tiers,
        reports_cost=found.id == "openrouter",
    )


def catalogue_sheet(
    provider: str, base_url: str, model: str, *, at: datetime | None = None
) -> PriceSheet | None:
    """The catalogue's prices for this provider, endpoint and model on that day, or None."""
    day = (at or datetime.now(UTC)).astimezone(UTC).date().isoformat()
    return _catalogue(provider, _canonical(base_url), model, day)


def _canonical(base_url: str) -> str:
    return re.sub(r"/+$", "", base_url.strip())


def sheet_for(
    provider: str, base_url: str, model: str, prices: Any, *, at: datetime | None = None
) -> PriceSheet:
    """The prices an agent's calls are charged at: its own, else the catalogue's; NoPrice if none."""
    own = parse_prices(provider, prices)
    if own:
        return override_sheet(own)
    found = catalogue_sheet(provider, base_url, model, at=at)
    if found is None:
        raise NoPrice(provider, model)
    return found


RATE_FIELDS = tuple(field.name for field in fields(Rates))
