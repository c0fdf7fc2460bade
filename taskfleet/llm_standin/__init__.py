"""An offline stand-in for the Anthropic Messages and Message Batches API (a real HTTP server on
127.0.0.1), for tests, the benchmark and `taskfleet demo --llm` without an API key."""

from taskfleet.llm_standin.server import StandIn, default_behavior

__all__ = ["StandIn", "default_behavior"]
