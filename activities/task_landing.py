"""Handing a task's committed branch over to be landed: one landing op to the clone's
`GitBatchWorkflow` (or an entry to the merge queue), never a push; ops of tasks ending together
leave in one signal. The board's last tasks ask for a flush once queued. The op id comes from the
run and the task, so a retried submit is kept once."""

from __future__ import annotations

from temporalio import activity

from taskfleet.activities.git.landing_outbox import outbox
from taskfleet.activities.git.queue_entry import submit_to_queue
from taskfleet.core.ids import landing_op_id
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.core.models.orchestrator import TaskInput, TaskResult
from taskfleet.core.names import FLUSH_AFTER, SIGNAL_ENQUEUE, SIGNAL_FLUSH
from taskfleet.core.workflow_start import git_batcher, op_payload


def landing_op(params: TaskInput, commit: str) -> GitOp:
    """The git op that lands the task's branch: a push of the branch, or a merge into the base."""
    task = params.task
    merge = params.land == "merge"
    return GitOp(
        op_type="merge" if merge else "push",
        branch=task.branch,
        target=params.base if merge else "",
        id=landing_op_id(params.run_key, task.id),
        reply_to=params.reply_to,
        message=(f"Merge {task.id}: {task.scope}" if task.scope else f"Merge {task.id}")[:200]
        if merge else "",
        # A task branch belongs to taskfleet: a re-run replaces what an earlier run pushed.
        force=not merge,
        # The batcher fails the op unless the branch is still this task's commit when it lands.
        expect_commit=commit,
    )


def batcher_config(params: TaskInput) -> GitBatchConfig:
    """The clone's git batcher as the run configured it (started with this if none runs yet)."""
    return GitBatchConfig(
        repo=params.repo, remote=params.remote, max_batch_size=params.git_max_batch_size,
        max_batch_age_seconds=params.git_max_batch_age_seconds,
    )


async def submit_landing(params: TaskInput, result: TaskResult) -> None:
    """Submit `result.commit` for landing; note the op's id on `result` (from an activity)."""
    if params.queue is not None:
        await submit_to_queue(params, result)
        return
    op = landing_op(params, result.commit)
    config = batcher_config(params)
    client = activity.client()

    target = git_batcher(config, params.git_task_queue)
    batcher = target.workflow_id

    async def send(ops: list[dict]) -> object:
        async def start(options: dict) -> object:
            return await client.start_workflow(target.workflow_type, config,
                                               start_signal=SIGNAL_ENQUEUE,
                                               start_signal_args=[ops], **options)

        return await target.start(start)

    together = list(params.land_together)

    async def flush() -> None:
        # A signal of its own, not a field of the op: an older batcher refuses an op with a field it
        # does not know.
        await client.get_workflow_handle(batcher).signal(SIGNAL_FLUSH, {FLUSH_AFTER: together})

    await outbox().send(batcher, op_payload(op), send,
                        flush=(tuple(together), flush) if together else None)
    result.landing_op_id = op.id
