"""Wire types of the Claude implementer: the per-task child workflow, the batcher, their activities.
Params, replies and edits live in the payload store; these carry `PayloadRef`s and small routing
fields (the inline `params` and `message` fields serve runs from before the store). Nothing secret
is ever here: the API key stays in the worker's environment."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Any, Optional

from taskfleet.core.models.orchestrator import TaskInput
from taskfleet.core.models.payload import PayloadRef

# Result types of a request: the Message Batches API's, and `failed` (taskfleet got none)
REPLY_SUCCEEDED = "succeeded"
REPLY_ERRORED = "errored"
REPLY_CANCELED = "canceled"
REPLY_EXPIRED = "expired"
REPLY_FAILED = "failed"


@dataclass
class LLMUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass
class LLMReply:
    """The answer to one request: the API's message (succeeded) or why there is none."""

    custom_id: str
    type: str
    message: dict = field(default_factory=dict)  # inline Message: only from before the store
    error: str = ""
    batch_id: str = ""  # "" for a direct call
    usage: LLMUsage = field(default_factory=LLMUsage)
    message_ref: Optional[PayloadRef] = None  # the Message object as JSON, in the payload store
    tool_id: str = ""  # its first tool call: what the workflow answers a tool_result to
    tool_name: str = ""


@dataclass
class ModelUsage:
    """What one workflow's Claude requests cost: requests, the calls they took, tokens, an
    estimate."""

    requests: int = 0
    direct_calls: int = 0
    batch_ids: list[str] = field(default_factory=list)  # distinct Message Batches used
    input_tokens: int = 0  # cache writes included
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class LLMRequest:
    """What `submit` carries: the params by reference (or inline, small, when typed by hand);
    `enqueued_at` is set by the batcher."""

    custom_id: str
    params: dict
    reply_to: str
    max_batch_size: int = 100_000
    max_batch_age_seconds: float = 10.0
    enqueued_at: str = ""
    params_ref: Optional[PayloadRef] = None


@dataclass
class ModelRequest:
    """A request as a workflow holds it: the stored prepared request, then small turns added since
    (an assistant turn names a stored reply: `{"role": "assistant", "reply": {"key", "size"}}`)."""

    prepared: Optional[PayloadRef] = None
    params: dict = field(default_factory=dict)  # a request prepared before the store
    turns: list = field(default_factory=list)


@dataclass
class LLMBatchConfig:
    """How the batcher polls; given by whoever starts it (the first submitter)."""

    poll_initial_seconds: float = 1.0
    poll_max_seconds: float = 60.0
    api_timeout_seconds: float = 120.0  # one API call's activity timeout
    max_history_events: int = 0  # test hook: continue-as-new past this many events
    # A flush is cut at whichever comes first (the API allows 100,000 requests, 256 MB of params)
    max_requests: int = 100_000
    max_bytes: int = 240_000_000


@dataclass
class InFlightBatch:
    """A flush: its requests' routing (not their params) and, once created, the API's batch id."""

    flush_id: str
    custom_ids: list[str]
    reply_to: list[str]  # parallel to custom_ids
    cut_at: str
    batch_id: str = ""
    processing_status: str = ""
    request_counts: dict = field(default_factory=dict)
    polls: int = 0
    next_poll_seconds: float = 1.0
    next_poll_at: str = ""
    created_at: str = ""
    ended_at: str = ""
    failures: int = 0  # polls or result reads in a row that failed for good


@dataclass
class RejectedSubmit:
    what: str  # a bounded description of what arrived
    reason: str
    at: str


@dataclass
class LLMBatchStats:
    submitted: int = 0
    duplicates: int = 0
    rejected: int = 0
    batches_created: int = 0
    batches_recovered: int = 0  # found again after a crash between create and recording its id
    results_delivered: int = 0
    unknown_results: int = 0
    polls: int = 0


@dataclass
class LLMBatchState:
    """Everything that survives continue-as-new."""

    pending: list[LLMRequest] = field(default_factory=list)
    in_flight: list[InFlightBatch] = field(default_factory=list)
    recent_ids: list[str] = field(default_factory=list)
    rejected: list[RejectedSubmit] = field(default_factory=list)
    recent_batches: list[InFlightBatch] = field(default_factory=list)
    stats: LLMBatchStats = field(default_factory=LLMBatchStats)
    next_flush: int = 1
    flush_requested: bool = False
    runs: int = 1


@dataclass
class LLMBatchStatus:
    pending: list[str]  # custom ids waiting for the next flush
    in_flight: list[InFlightBatch]
    recent_batches: list[InFlightBatch]
    rejected: list[RejectedSubmit]
    stats: LLMBatchStats
    config: LLMBatchConfig
    runs: int


# --- activities of the batcher --------------------------------------------------------------------


@dataclass
class BatchEntry:
    custom_id: str
    params: PayloadRef


@dataclass
class CreateBatchInput:
    flush_id: str
    requests: list[dict]  # [{"custom_id", "params"}]: requests whose params came inline
    cut_at: str  # when the flush was cut (workflow time): the earliest its batch can have been made
    known_batch_ids: list[str] = field(default_factory=list)  # never adopt one of these
    entries: list[BatchEntry] = field(default_factory=list)  # the rest: params in the payload store


@dataclass
class CreateBatchOutput:
    batch_id: str
    recovered: bool = False  # an earlier attempt had created it
    # custom id -> why it was left out (its params could not be read): told to its task as failed
    left_out: dict[str, str] = field(default_factory=dict)


@dataclass
class PollBatchOutput:
    batch_id: str
    processing_status: str
    request_counts: dict = field(default_factory=dict)


@dataclass
class DeliverResultsInput:
    batch_id: str
    custom_ids: list[str]
    reply_to: list[str]


@dataclass
class DeliverResultsOutput:
    delivered: int = 0
    unknown: list[str] = field(default_factory=list)  # custom ids not of this batch (dropped)
    missing: list[str] = field(default_factory=list)  # ours with no result line


# --- the per-task child workflow ----------------------------------------------------------------


@dataclass
class LLMTaskInput:
    task_input: TaskInput
    # Payloads in the store, prepare and land as local activities (older runs: as recorded)
    stored: bool = False


@dataclass
class PreparedRequest:
    params: dict = field(default_factory=dict)  # inline: only from before the store
    cache_key: str = ""
    base_commit: str = ""
    prompt_hash: str = ""
    cached_edits: Optional[list] = None  # inline cache hit: only from before the store
    cached_summary: str = ""
    request: Optional[PayloadRef] = None  # model, max_tokens, system, messages, tools, tool_choice
    model: str = ""
    cached: Optional[PayloadRef] = None  # a cache hit: {"edits", "summary"} that passed before
    task: Optional[PayloadRef] = None  # the TaskInput, for the steps that read it from the store
    submitted: bool = False  # the request went to the batcher already


@dataclass
class SubmitInput:
    request: LLMRequest  # routing and flush rules; its params come from `model_request`
    batch_workflow_id: str
    task_queue: str
    model_request: Optional[ModelRequest] = None


@dataclass
class DirectCallInput:
    custom_id: str
    params: dict = field(default_factory=dict)  # inline: only from before the store
    request: Optional[ModelRequest] = None


@dataclass
class ApplyInput:
    task_input: Optional[TaskInput] = None  # or stored: `task`
    edits: Any = None  # inline, unvalidated: only from before the store
    summary: str = ""
    attempt: int = 1
    cache_key: str = ""  # set: store the edits under it when they pass verification
    from_cache: bool = False
    reviewed_commit: str = ""  # a task with a judge: the commit of the attempt the judge sent back
    # The stored reply with the apply_edits call, or a stored cache hit {"edits", "summary"}
    answer: Optional[PayloadRef] = None
    task: Optional[PayloadRef] = None
    hold_landing: bool = False  # with `task`: as TaskInput.hold_landing, report_stages
    report_stages: bool = False


@dataclass
class FailureInput:
    task_input: TaskInput
    failure_type: str
    reason: str
