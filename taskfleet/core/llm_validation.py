"""Validation of what reaches `LLMBatchWorkflow.submit`: anyone with the `temporal` CLI can send it
anything, so the handler takes raw input and this says, in one bounded line, what is wrong."""

from __future__ import annotations

import json
from typing import Any

from taskfleet.core.llm_ids import CUSTOM_ID
from taskfleet.core.models.llm import LLMRequest
from taskfleet.core.models.payload import ref_of

MAX_REQUEST_BYTES = 1_500_000  # one signal's payload stays under the server's 2 MB blob limit
MAX_BATCH_SIZE = 100_000  # the API's limit per batch
MAX_BATCH_BYTES = 256_000_000  # and its size
DESCRIBE_LIMIT = 200


class InvalidSubmit(ValueError):
    pass


def describe(raw: Any) -> str:
    """A bounded description of anything (never the whole of a large or deep payload)."""
    try:
        text = repr(raw)
    except Exception:  # noqa: BLE001 - a hostile __repr__ cannot reach us, but stay safe
        text = f"<{type(raw).__name__}>"
    return (text if len(text) <= DESCRIBE_LIMIT
            else text[:DESCRIBE_LIMIT] + f"... ({len(text)} chars)")


def parse_submit(args: tuple) -> LLMRequest:
    if len(args) != 1:
        raise InvalidSubmit(f"submit takes one request object, got {len(args)} arguments")
    raw = args[0]
    if isinstance(raw, LLMRequest):
        raw = raw.__dict__
    if not isinstance(raw, dict):
        raise InvalidSubmit(f"a request must be an object, got {type(raw).__name__}")
    unknown = set(raw) - set(LLMRequest.__dataclass_fields__)
    if unknown:
        raise InvalidSubmit(f"unknown field(s) {', '.join(sorted(map(str, unknown)))[:100]}")
    custom_id, params, reply_to = raw.get("custom_id"), raw.get("params"), raw.get("reply_to")
    if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
        raise InvalidSubmit("custom_id must match ^[a-zA-Z0-9_-]{1,64}$")
    if not isinstance(reply_to, str) or not reply_to or len(reply_to) > 1000:
        raise InvalidSubmit("reply_to must be a workflow id")
    ref = ref_of(raw.get("params_ref"))
    if raw.get("params_ref") is not None:
        if ref is None:
            raise InvalidSubmit("params_ref must be {key: 64 hex digits (SHA-256), size: bytes}")
        if ref.size > MAX_BATCH_BYTES:
            raise InvalidSubmit(f"params_ref.size is {ref.size} bytes; at most {MAX_BATCH_BYTES}")
        params = {}
    else:
        _check_inline(params)
    max_size = raw.get("max_batch_size", MAX_BATCH_SIZE)
    max_age = raw.get("max_batch_age_seconds", 10.0)
    whole = isinstance(max_size, int) and not isinstance(max_size, bool)
    if not whole or not 1 <= max_size <= MAX_BATCH_SIZE:
        raise InvalidSubmit(f"max_batch_size must be a whole number 1..{MAX_BATCH_SIZE}")
    number = isinstance(max_age, (int, float)) and not isinstance(max_age, bool)
    if not number or not 0 <= max_age <= 86_400:
        raise InvalidSubmit("max_batch_age_seconds must be a number 0..86400")
    return LLMRequest(custom_id=custom_id, params=params, reply_to=reply_to,
                      max_batch_size=max_size, max_batch_age_seconds=float(max_age), params_ref=ref)


def _check_inline(params: Any) -> None:
    """Params typed inline (by hand): the Messages API's required keys, plain JSON, small."""
    if not isinstance(params, dict):
        raise InvalidSubmit("params must be an object (Messages API params), or give params_ref")
    for key, kind in (("model", str), ("max_tokens", int), ("messages", list)):
        if not isinstance(params.get(key), kind) or isinstance(params.get(key), bool):
            raise InvalidSubmit(f"params.{key} must be a {kind.__name__}")
    try:
        size = len(json.dumps(params))
    except (TypeError, ValueError, RecursionError):
        raise InvalidSubmit("params must be plain JSON") from None
    if size > MAX_REQUEST_BYTES:
        raise InvalidSubmit(f"params are {size} bytes; at most {MAX_REQUEST_BYTES}")
