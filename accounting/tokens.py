"""The kinds of input token a provider bills apart (docs/contract.md#dollars-as-billed): shared by a
provider's reported usage (runs.providers.base.Usage) and the ledger entry that records it."""

from __future__ import annotations


class InputByKind:
    """`input_tokens` counts every input token; the cache reads and writes are among them."""

    input_tokens: int
    cache_read_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int

    @property
    def uncached_input_tokens(self) -> int:
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens


class TokensByKind(InputByKind):
    """And all output, reasoning among it: what a price sheet charges a call for (runs.pricing)."""

    output_tokens: int
