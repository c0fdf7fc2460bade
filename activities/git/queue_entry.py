"""A task's side of landing through the merge queue: its entry, and where a re-run starts.

With `land = "queue"` a task's branch is not pushed: it stays in the clone, where the target's
`MergeQueueWorkflow` reads it, and the task sends one entry (signal-with-start). The entry carries
what taskfleet knows of the change's risk (the queue batches a risky entry with fewer others) and
the paths it changes. A task the queue sent back runs again from the target's tip the queue judged
it on, with the reason in its environment.
"""

from __future__ import annotations

import asyncio
import subprocess

from temporalio import activity

from taskfleet.activities.git.worktrees import resolve
from taskfleet.core.ids import landing_op_id
from taskfleet.core.merge_queue_validation import MAX_FILE_CHARS, MAX_FILES, MAX_RISK
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry
from taskfleet.core.models.orchestrator import TaskInput, TaskResult
from taskfleet.core.names import SIGNAL_ENQUEUE
from taskfleet.core.workflow_start import entry_payload, merge_queue


def base_commit_of(params: TaskInput) -> str:
    """The commit a task starts from: its base branch in the clone, or, for a re-run after the merge
    queue sent its change back, the target's tip the queue judged it on."""
    if params.queue is not None and params.queue.start_commit:
        return params.queue.start_commit
    return resolve(params.repo, params.base, params.remote)


def queue_env(params: TaskInput) -> dict[str, str]:
    """What a command task re-run after the merge queue sent it back learns from its environment."""
    if params.queue is None or not params.queue.attempt:
        return {}
    return {"TASKFLEET_QUEUE_ATTEMPT": str(params.queue.attempt),
            "TASKFLEET_QUEUE_FEEDBACK": params.queue.feedback}


def risk_of(params: TaskInput, result: TaskResult) -> int:
    """One point for each sign the change was hard to get right: a judge's revise round, a fix
    round of the model, an earlier send-back by the queue."""
    judged = params.attempt > 1 or bool(result.judge is not None and result.judge.revised)
    fixed = result.llm_requests > 1
    requeued = params.queue is not None and params.queue.attempt > 0
    return int(judged) + int(fixed) + int(requeued)


def changed_files(repo: str, base: str, commit: str) -> list[str]:
    """The paths the task's commit changes against its base (at most MAX_FILES; [] if git cannot
    tell)."""
    command = ["git", "-C", repo, "diff", "--name-only", "--no-renames", f"{base}...{commit}"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    return [p for p in out.stdout.splitlines() if 0 < len(p) <= MAX_FILE_CHARS][:MAX_FILES]


async def submit_to_queue(params: TaskInput, result: TaskResult) -> None:
    """Send the task's branch (it stays in the clone, where the queue reads it) to the target's
    `MergeQueueWorkflow`, starting it if needed; the queue tells the orchestrator its outcome."""
    task, landing = params.task, params.queue
    try:
        base = await asyncio.to_thread(base_commit_of, params)
    except Exception:  # noqa: BLE001 - the paths only sharpen batching; the entry goes without them
        base = ""
    files = await asyncio.to_thread(changed_files, params.repo, base, result.commit) if base else []
    entry = QueueEntry(branch=task.branch, expect_commit=result.commit,
                       id=landing_op_id(params.run_key, task.id), reply_to=params.reply_to,
                       verify=landing.verify or task.verify, task_type=task.task_type,
                       risk=min(risk_of(params, result), MAX_RISK), files=files)
    config = MergeQueueConfig(repo=params.repo, target=landing.target, remote=params.remote,
                              verify=landing.verify, max_batch=landing.max_batch,
                              max_wait_seconds=landing.max_wait_seconds, parallel=landing.parallel,
                              flake_retries=landing.flake_retries)
    client = activity.client()

    target = merge_queue(config, params.git_task_queue)

    async def start(options: dict) -> object:
        return await client.start_workflow(target.workflow_type, config,
                                           start_signal=SIGNAL_ENQUEUE,
                                           start_signal_args=[entry_payload(entry)], **options)

    await target.start(start)
    result.landing_op_id = entry.id
