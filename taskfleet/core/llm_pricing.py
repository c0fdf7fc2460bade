"""Estimated cost of Claude requests: list prices per million tokens by model family. An estimate
for the run summary, not a bill: unknown models are priced as Sonnet; Message Batches cost half,
cache reads a tenth of input, cache writes 1.25x."""

from __future__ import annotations

from taskfleet.core.models.llm import LLMUsage

# (input, output) USD per million tokens
PRICES = {"opus": (5.0, 25.0), "sonnet": (3.0, 15.0), "haiku": (1.0, 5.0)}
BATCH_DISCOUNT = 0.5


def price_of(model: str) -> tuple[float, float]:
    for family, price in PRICES.items():
        if family in model:
            return price
    return PRICES["sonnet"]


def estimate_cost(model: str, usage: LLMUsage, batched: bool) -> float:
    price_in, price_out = price_of(model)
    dollars = (usage.input_tokens * price_in + usage.cache_read_tokens * price_in * 0.1
               + usage.cache_creation_tokens * price_in * 1.25
               + usage.output_tokens * price_out) / 1_000_000
    return round(dollars * (BATCH_DISCOUNT if batched else 1.0), 6)
