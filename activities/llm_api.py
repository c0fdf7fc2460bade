"""The Claude API side of the implementer's activities: requests sent (one `messages.create`, or as
Message Batches through `LLMBatchWorkflow`), batches created and polled, results delivered. None
waits for a batch; requests and replies go through the payload store (workflows hold references);
the API key comes from the worker's environment and never enters a payload, log or error."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.model_io.payload_store import PayloadStore, PayloadStoreError
from taskfleet.activities.model_io.stored_calls import request_params, stored_params, stored_reply
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
from taskfleet.core.models.payload import compact
from taskfleet.core.names import (
    ACTIVITY_LLM_CALL_DIRECT,
    ACTIVITY_LLM_CREATE_BATCH,
    ACTIVITY_LLM_DELIVER_RESULTS,
    ACTIVITY_LLM_POLL_BATCH,
    ACTIVITY_LLM_SUBMIT,
    LLM_BATCH_WORKFLOW,
    SIGNAL_LLM_REPLY,
    SIGNAL_SUBMIT,
)

if TYPE_CHECKING:
    import anthropic

# Worker and API clocks may differ: a batch this much older than its flush is not the flush's.
CLOCK_SKEW = timedelta(minutes=10)
RETRYABLE_STATUS = {408, 409, 429}
DELIVERIES = 16  # results signalled to their tasks at once


def sdk() -> Any:
    """The `anthropic` SDK, imported on first use: its import costs over a second of CPU, which a
    worker whose boards never call Claude should not pay."""
    import anthropic

    return anthropic


def _api_error_message(err: anthropic.APIStatusError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = inner.get("message") or str(err)
    return f"{err.status_code} {inner.get('type', 'error')}: {message}"[:500]


def _raise_api(err: Exception, what: str) -> None:
    """An API failure as an ApplicationError: retryable unless the API refused the request."""
    if isinstance(err, sdk().APIStatusError):
        retryable = err.status_code in RETRYABLE_STATUS or err.status_code >= 500
        raise ApplicationError(f"{what}: {_api_error_message(err)}", type="AnthropicAPIError",
                               non_retryable=not retryable) from None
    raise ApplicationError(f"{what}: {type(err).__name__}: {err}"[:500],
                           type="AnthropicConnectionError") from None


def usage_of(message: dict) -> LLMUsage:
    usage = message.get("usage") or {}
    return LLMUsage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_creation_tokens=int(usage.get("cache_creation_input_tokens") or 0),
    )


class LLMApiActivities:
    def __init__(self, llm: LLMSettings, store: PayloadStore) -> None:
        self.llm = llm
        self.store = store
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_env: tuple[str, str] | None = None

    def activities(self) -> list[Any]:
        return [self.submit, self.call_direct, self.create_batch, self.poll_batch,
                self.deliver_results]

    async def preload(self) -> None:
        """Import the SDK now, off the event loop, if this worker may call Claude: its first request
        should not stall the worker's other activities for the import."""
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
        """Signal-with-start the queue's LLMBatchWorkflow with one request (its config from this
        worker); the request's params go by reference (stored first, if they came inline)."""
        request = params.request
        if params.model_request is not None:
            request.params_ref = await stored_params(self.store, params.model_request)
        elif request.params_ref is None:
            request.params_ref = await self.store.put_json(request.params)
        await submit_request(self.llm, params)

    @activity.defn(name=ACTIVITY_LLM_CALL_DIRECT)
    async def call_direct(self, params: DirectCallInput) -> LLMReply:
        """One `messages.create` (llm_batch = false); a request the API refuses: `errored`."""
        body = await request_params(self.store, params.request) if params.request else params.params
        try:
            message = await self.client().messages.create(**body)
        except sdk().APIStatusError as err:
            if err.status_code in RETRYABLE_STATUS or err.status_code >= 500:
                _raise_api(err, "messages.create")
            return LLMReply(custom_id=params.custom_id, type=REPLY_ERRORED,
                            error=_api_error_message(err))
        except sdk().APIError as err:
            _raise_api(err, "messages.create")
        data = message.to_dict()
        reply = LLMReply(custom_id=params.custom_id, type=REPLY_SUCCEEDED, message=data,
                         usage=usage_of(data))
        return compact(await stored_reply(self.store, reply))

    @activity.defn(name=ACTIVITY_LLM_CREATE_BATCH)
    async def create_batch(self, params: CreateBatchInput) -> CreateBatchOutput:
        """ONE `messages.batches.create` per flush (a request whose params cannot be read is left
        out); `create` has no idempotency key, so a retry first looks for an earlier attempt's."""
        requests, left_out = await self._batch_requests(params)
        out = CreateBatchOutput(batch_id="", left_out=left_out)
        if not requests:
            return out
        client = self.client()
        if activity.info().attempt > 1:
            found = await self._find_earlier_batch(client, params, len(requests))
            if found:
                activity.logger.warning("%s: found batch %s made by an earlier attempt",
                                        params.flush_id, found)
                out.batch_id, out.recovered = found, True
                return out
        try:
            # No SDK retry: a timed-out create may have succeeded; the next attempt looks first.
            once = client.with_options(max_retries=0,
                                       timeout=max(self.llm.api_timeout_seconds - 5, 5))
            batch = await once.messages.batches.create(requests=requests)
        except sdk().APIError as err:
            _raise_api(err, "messages.batches.create")
        out.batch_id = batch.id
        return out

    async def _batch_requests(self, params: CreateBatchInput) -> tuple[list[dict], dict[str, str]]:
        """The batch's requests, params read from the store (all at once, off the event loop)."""
        refs = [entry.params for entry in params.entries]

        def read() -> list:  # in a thread: a batch's params can be 200 MB of JSON
            return [d if isinstance(d, PayloadStoreError) else json.loads(d)
                    for d in self.store.get_many(refs)]

        try:
            found = await asyncio.to_thread(read)
        except PayloadStoreError as err:  # the store itself is down: retried with backoff
            raise err.application_error() from None
        requests, left_out = list(params.requests), {}
        for entry, data in zip(params.entries, found):
            if isinstance(data, PayloadStoreError):
                activity.logger.warning("%s: %s left out: %s", params.flush_id, entry.custom_id,
                                        data)
                left_out[entry.custom_id] = str(data)
            else:
                requests.append({"custom_id": entry.custom_id, "params": data})
        return requests, left_out

    async def _find_earlier_batch(self, client: anthropic.AsyncAnthropic, params: CreateBatchInput,
                                  count: int) -> str:
        """A batch created since the flush was cut, with exactly its request count, not recorded; a
        wrong pick shows as missing results (matched by custom_id), never another task's edits."""
        try:
            page = await client.messages.batches.list(limit=100)
        except sdk().APIError as err:
            _raise_api(err, "messages.batches.list")
        since = datetime.fromisoformat(params.cut_at) - CLOCK_SKEW
        known = set(params.known_batch_ids)
        candidates = []
        for batch in page.data:
            counts = batch.request_counts
            total = (counts.processing + counts.succeeded + counts.errored + counts.canceled
                     + counts.expired)
            created = (batch.created_at if batch.created_at.tzinfo
                       else batch.created_at.replace(tzinfo=since.tzinfo))
            if batch.id not in known and total == count and created >= since:
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
        """Each result (unordered) signalled to its task by custom_id, so bulk output never enters
        the batcher's history; a retry re-sends, and each task keeps its first reply."""
        routes = dict(zip(params.custom_ids, params.reply_to))
        out = DeliverResultsOutput()
        seen: set[str] = set()
        temporal = activity.client()
        gate = asyncio.Semaphore(DELIVERIES)
        sends: list[asyncio.Task] = []

        async def deliver(workflow_id: str, reply: LLMReply) -> None:
            async with gate:
                await self._reply(temporal, workflow_id, reply)

        def send(workflow_id: str, reply: LLMReply) -> None:
            sends.append(asyncio.create_task(deliver(workflow_id, reply)))

        try:
            lines = await self.client().messages.batches.results(params.batch_id)
            async for line in lines:
                data = line.to_dict()
                custom_id = str(data.get("custom_id", ""))
                if custom_id not in routes:
                    activity.logger.warning("batch %s: result for unknown custom_id %r dropped",
                                            params.batch_id, custom_id[:80])
                    out.unknown.append(custom_id[:80])
                    continue
                send(routes[custom_id], _reply_of(data, params.batch_id))
                seen.add(custom_id)
                out.delivered += 1
                activity.heartbeat(out.delivered)
            for custom_id in params.custom_ids:
                if custom_id not in seen:
                    out.missing.append(custom_id)
                    send(routes[custom_id], LLMReply(
                        custom_id=custom_id, type=REPLY_FAILED, batch_id=params.batch_id,
                        error=f"batch {params.batch_id} has no result for this request"))
            await asyncio.gather(*sends)  # a store failure fails the step: it is retried whole
        except sdk().APIError as err:
            _raise_api(err, f"messages.batches.results {params.batch_id}")
        finally:
            for task in sends:
                task.cancel()
            await asyncio.gather(*sends, return_exceptions=True)
        return out

    async def _reply(self, temporal: Any, workflow_id: str, reply: LLMReply) -> None:
        """The reply, its message stored first, to the task that waits for it."""
        reply = await stored_reply(self.store, reply)
        try:
            await temporal.get_workflow_handle(workflow_id).signal(SIGNAL_LLM_REPLY, compact(reply))
        except Exception as err:  # noqa: BLE001 - a finished task is not the batch's failure
            activity.logger.warning("could not deliver %s to %s: %s", reply.custom_id,
                                    workflow_id, err)


async def submit_request(llm: LLMSettings, params: SubmitInput) -> None:
    """Signal-with-start the queue's LLMBatchWorkflow with a request whose params are stored."""
    params.request.params = {}
    await activity.client().start_workflow(
        LLM_BATCH_WORKFLOW, llm.batch_config(), id=params.batch_workflow_id,
        task_queue=params.task_queue, start_signal=SIGNAL_SUBMIT,
        start_signal_args=[compact(params.request)],
        static_summary="Claude requests of this task queue, sent as Message Batches",
    )


def _reply_of(line: dict, batch_id: str) -> LLMReply:
    custom_id = str(line.get("custom_id", ""))
    result = line.get("result") if isinstance(line.get("result"), dict) else {}
    kind = str(result.get("type", REPLY_FAILED))
    if kind == REPLY_SUCCEEDED:
        message = result.get("message") if isinstance(result.get("message"), dict) else {}
        return LLMReply(custom_id=custom_id, type=kind, message=message, batch_id=batch_id,
                        usage=usage_of(message))
    error = ""
    if kind == REPLY_ERRORED:
        outer = result.get("error") if isinstance(result.get("error"), dict) else {}
        inner = outer.get("error") if isinstance(outer.get("error"), dict) else outer
        error = f"{inner.get('type', 'error')}: {inner.get('message', '')}"[:500]
    return LLMReply(custom_id=custom_id, type=kind, error=error or f"the batch reported {kind}",
                    batch_id=batch_id)
