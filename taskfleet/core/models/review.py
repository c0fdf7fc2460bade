"""Wire types of the judge's review: what `submit_review` answers, what a judged task reports."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Optional

VERDICT_APPROVE = "approve"  # the change lands
VERDICT_REVISE = "revise"  # a fix round of the implementer, with the comments
VERDICT_REJECT = "reject"  # the task fails with the reasons; nothing lands
VERDICTS = (VERDICT_APPROVE, VERDICT_REVISE, VERDICT_REJECT)

# A task's stage while it runs (progress, `taskfleet status`, the Web UI)
STAGE_IMPLEMENTING = "implementing"
STAGE_VERIFYING = "verifying"
STAGE_JUDGING = "judging"
STAGE_LANDING = "landing"
STAGES = (STAGE_IMPLEMENTING, STAGE_VERIFYING, STAGE_JUDGING, STAGE_LANDING)


@dataclass
class ReviewComment:
    path: str
    text: str
    line: Optional[int] = None


@dataclass
class Review:
    """A verdict with its reasons and line comments (`submit_review`'s input, checked)."""

    verdict: str
    reasons: list[str] = field(default_factory=list)
    comments: list[ReviewComment] = field(default_factory=list)


@dataclass
class JudgeTally:
    """One task's judging: verdicts by kind, the calls they took, what they cost."""

    calls: int = 0  # verdicts asked for: model requests (schema retries too) or judge command runs
    cache_hits: int = 0  # verdicts taken from the result cache (no call)
    approved: int = 0
    revised: int = 0
    rejected: int = 0
    invalid: int = 0  # answers that broke submit_review's schema
    direct_calls: int = 0
    batch_ids: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class TaskStage:
    """`task_stage` (to the orchestrator): a running task moved on; `verdict` is its last one."""

    task_id: str
    stage: str
    verdict: str = ""
