"""The Claude API side of the implementer's activities: requests sent (one `messages.create`, or
through the queue's `LLMBatchWorkflow` as Message Batches), batches created and polled, results
delivered to the tasks that wait for them.

Each is short: no activity waits for a batch (the workflows do, on timers and signals). The API key
and endpoint come from the worker's environment (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, read by
the SDK); nothing secret enters a payload, a log line or an error message.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.core.llm_settings import LLMSettings
from taskfleet.core.models.llm import (
    REPLY_ERRORED,
    REPLY_FAILED,
    REPLY_SUCCEEDED,
    CreateBatchInput,
    CreateBatchOutput,
    DeliverResultsInput,
    DeliverResultsOutput,
    DirectCallInput,
    LLMReply,
    LLMUsage,
    PollBatchOutput,
    SubmitInput,
)
from taskfleet.core.names import (
    ACTIVITY_LLM_CALL_DIRECT,
    ACTIVITY_LLM_CREATE_BATCH,
    ACTIVITY_LLM_DELIVER_RESULTS,
    ACTIVITY_LLM_POLL_BATCH,
    ACTIVITY_LLM_SUBMIT,
    LLM_BATCH_WORKFLOW,
    SIGNAL_LLM_REPLY,
    SIGNAL_LLM_SUBMIT,
)

if TYPE_CHECKING:
    import anthropic

# A batch this much older than its flush cannot be the flush's (clocks of worker and API may differ).
CLOCK_SKEW = timedelta(minutes=10)
RETRYABLE_STATUS = {408, 409, 429}


def sdk() -> Any:
    """The `anthropic` SDK, imported on first use. Importing it takes over a second of CPU, which
    every worker start (and every worker process a test or a pod starts) would pay, though a worker
    whose boards never call Claude never needs it."""
    import anthropic

    return anthropic


def _api_error_message(err: anthropic.APIStatusError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = inner.get("message") or str(err)
    return f"{err.status_code} {inner.get('type', 'error')}: {message}"[:500]


def _raise_api(err: Exception, what: str) -> None:
    """An API failure as an ApplicationError: retryable unless the API refused the request itself."""
    if isinstance(err, sdk().APIStatusError):
        retryable = err.status_code in RETRYABLE_STATUS or err.status_code >= 500
        raise ApplicationError(f"{what}: {_api_error_message(err)}", type="AnthropicAPIError",
                               non_retryable=not retryable) from None
    raise ApplicationError(f"{what}: {type(err).__name__}: {err}"[:500], type="AnthropicConnectionError") from None


def usage_of(message: dict) -> LLMUsage:
    usage = message.get("usage") or {}
    return LLMUsage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_creation_tokens=int(usage.get("cache_creation_input_tokens") or 0),
    )


class LLMApiActivities:
    def __init__(self, llm: LLMSettings) -> None:
        self.llm = llm
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_env: tuple[str, str] | None = None

    def activities(self) -> list[Any]:
        return [self.submit, self.call_direct, self.create_batch, self.poll_batch, self.deliver_results]

    async def preload(self) -> None:
        """Import the SDK now, off the event loop, if this worker is set up to call Claude: its first
        request should not stall the worker's other activities for the import."""
        if os.environ.get("ANTHROPIC_API_KEY"):
            await asyncio.to_thread(sdk)

    def client(self) -> anthropic.AsyncAnthropic:
        """One SDK client per worker, rebuilt if the environment changed (the SDK reads it)."""
        env = (os.environ.get("ANTHROPIC_BASE_URL", ""), os.environ.get("ANTHROPIC_API_KEY", ""))
        if self._client is None or env != self._client_env:
            if not env[1]:
                raise ApplicationError("ANTHROPIC_API_KEY is not set in the worker's environment",
                                       type="AnthropicNotConfigured", non_retryable=True)
            self._client = sdk().AsyncAnthropic(max_retries=self.llm.sdk_max_retries)
            self._client_env = env
        return self._client

    @activity.defn(name=ACTIVITY_LLM_SUBMIT)
    async def submit(self, params: SubmitInput) -> None:
        """Signal-with-start the queue's LLMBatchWorkflow with one request (its config from this worker)."""
        await activity.client().start_workflow(
            LLM_BATCH_WORKFLOW, self.llm.batch_config(), id=params.batch_workflow_id, task_queue=params.task_queue,
            start_signal=SIGNAL_LLM_SUBMIT, start_signal_args=[params.request],
            static_summary="Claude requests of this task queue, sent as Message Batches",
        )

    @activity.defn(name=ACTIVITY_LLM_CALL_DIRECT)
    async def call_direct(self, params: DirectCallInput) -> LLMReply:
        """One `messages.create` (llm_batch = false). A request the API refuses is an `errored` reply."""
        try:
            message = await self.client().messages.create(**params.params)
        except sdk().APIStatusError as err:
            if err.status_code in RETRYABLE_STATUS or err.status_code >= 500:
                _raise_api(err, "messages.create")
            return LLMReply(custom_id=params.custom_id, type=REPLY_ERRORED, error=_api_error_message(err))
        except sdk().APIError as err:
            _raise_api(err, "messages.create")
        data = message.to_dict()
        return LLMReply(custom_id=params.custom_id, type=REPLY_SUCCEEDED, message=data, usage=usage_of(data))

    @activity.defn(name=ACTIVITY_LLM_CREATE_BATCH)
    async def create_batch(self, params: CreateBatchInput) -> CreateBatchOutput:
        """ONE `messages.batches.create` per flush. `create` has no idempotency key, so a retry first
        looks for the batch an earlier attempt made (a crash may have lost its answer)."""
        client = self.client()
        if activity.info().attempt > 1:
            found = await self._find_earlier_batch(client, params)
            if found:
                activity.logger.warning("%s: found batch %s made by an earlier attempt", params.flush_id, found)
                return CreateBatchOutput(batch_id=found, recovered=True)
        try:
            # No SDK retry here: a timed-out create may have succeeded; the next attempt looks first.
            once = client.with_options(max_retries=0, timeout=max(self.llm.api_timeout_seconds - 5, 5))
            batch = await once.messages.batches.create(requests=params.requests)
        except sdk().APIError as err:
            _raise_api(err, "messages.batches.create")
        return CreateBatchOutput(batch_id=batch.id)

    async def _find_earlier_batch(self, client: anthropic.AsyncAnthropic, params: CreateBatchInput) -> str:
        """The marker: a batch created since the flush was cut, with exactly its number of requests,
        that this batcher has not recorded. Results are matched by custom_id afterwards, so a wrong
        pick shows up as missing results (failed attempts), never as another task's edits."""
        try:
            page = await client.messages.batches.list(limit=100)
        except sdk().APIError as err:
            _raise_api(err, "messages.batches.list")
        since = datetime.fromisoformat(params.cut_at) - CLOCK_SKEW
        known = set(params.known_batch_ids)
        candidates = []
        for batch in page.data:
            counts = batch.request_counts
            total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
            created = batch.created_at if batch.created_at.tzinfo else batch.created_at.replace(tzinfo=since.tzinfo)
            if batch.id not in known and total == len(params.requests) and created >= since:
                candidates.append((created, batch.id))
        return min(candidates)[1] if candidates else ""

    @activity.defn(name=ACTIVITY_LLM_POLL_BATCH)
    async def poll_batch(self, batch_id: str) -> PollBatchOutput:
        try:
            batch = await self.client().messages.batches.retrieve(batch_id)
        except sdk().APIError as err:
            _raise_api(err, f"messages.batches.retrieve {batch_id}")
        return PollBatchOutput(batch_id=batch.id, processing_status=batch.processing_status,
                               request_counts=batch.request_counts.to_dict())

    @activity.defn(name=ACTIVITY_LLM_DELIVER_RESULTS)
    async def deliver_results(self, params: DeliverResultsInput) -> DeliverResultsOutput:
        """Read the batch's results (unordered) and signal each request's workflow by custom_id.

        Results go straight to the waiting task, so bulk output never enters the batcher's history.
        A retry re-sends; each task keeps the first reply per custom_id."""
        routes = dict(zip(params.custom_ids, params.reply_to))
        out = DeliverResultsOutput()
        seen: set[str] = set()
        temporal = activity.client()
        try:
            lines = await self.client().messages.batches.results(params.batch_id)
            async for line in lines:
                data = line.to_dict()
                custom_id = str(data.get("custom_id", ""))
                if custom_id not in routes:
                    activity.logger.warning("batch %s: result for unknown custom_id %r dropped", params.batch_id,
                                            custom_id[:80])
                    out.unknown.append(custom_id[:80])
                    continue
                await self._reply(temporal, routes[custom_id], _reply_of(data, params.batch_id))
                seen.add(custom_id)
                out.delivered += 1
                activity.heartbeat(out.delivered)
        except sdk().APIError as err:
            _raise_api(err, f"messages.batches.results {params.batch_id}")
        for custom_id in params.custom_ids:
            if custom_id not in seen:
                out.missing.append(custom_id)
                await self._reply(temporal, routes[custom_id], LLMReply(
                    custom_id=custom_id, type=REPLY_FAILED, batch_id=params.batch_id,
                    error=f"batch {params.batch_id} has no result for this request"))
        return out

    async def _reply(self, temporal: Any, workflow_id: str, reply: LLMReply) -> None:
        try:
            await temporal.get_workflow_handle(workflow_id).signal(SIGNAL_LLM_REPLY, reply)
        except Exception as err:  # noqa: BLE001 - a finished or vanished task is not the batch's failure
            activity.logger.warning("could not deliver %s to %s: %s", reply.custom_id, workflow_id, err)


def _reply_of(line: dict, batch_id: str) -> LLMReply:
    custom_id = str(line.get("custom_id", ""))
    result = line.get("result") if isinstance(line.get("result"), dict) else {}
    kind = str(result.get("type", REPLY_FAILED))
    if kind == REPLY_SUCCEEDED:
        message = result.get("message") if isinstance(result.get("message"), dict) else {}
        return LLMReply(custom_id=custom_id, type=kind, message=message, batch_id=batch_id, usage=usage_of(message))
    error = ""
    if kind == REPLY_ERRORED:
        outer = result.get("error") if isinstance(result.get("error"), dict) else {}
        inner = outer.get("error") if isinstance(outer.get("error"), dict) else outer
        error = f"{inner.get('type', 'error')}: {inner.get('message', '')}"[:500]
    return LLMReply(custom_id=custom_id, type=kind, error=error or f"the batch reported {kind}", batch_id=batch_id)
