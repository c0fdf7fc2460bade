"""A prompt of any size reaches the executor, by file; the environment carries the
prompt itself only when it is small (exec refuses any one variable over 128 KiB)."""

from __future__ import annotations

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec

# The executor checks what it was given: the prompt file always, the variable only for small
# prompts.
HAS_FILE = ('test -s "$TASKFLEET_PROMPT_FILE" && test "$(wc -c < "$TASKFLEET_PROMPT_FILE")"'
            ' -ge {size}')
NO_VARIABLE = 'test -z "${{TASKFLEET_PROMPT+set}}"'
SAME_AS_FILE = 'test "$TASKFLEET_PROMPT" = "$(cat "$TASKFLEET_PROMPT_FILE")"'


async def test_big_prompt_reaches_the_executor_by_file_small_one_also_by_variable(
    client, make_worker, task_queue, git_remote
):
    big = 200 * 1024
    tasks = [
        TaskSpec(id="big", template="x" * big + " {{ task.id }}", worktree=False,
                 run=HAS_FILE.format(size=big) + " && " + NO_VARIABLE.format(), verify="true"),
        TaskSpec(id="small", template="small prompt for {{ task.id }}", worktree=False,
                 run=HAS_FILE.format(size=10) + " && " + SAME_AS_FILE, verify="true"),
    ]
    async with make_worker():
        handle = await start_board(client, Board(tasks=tasks, name="prompts", max_parallel=2),
                                   str(git_remote.clone), task_queue=task_queue)
        result = await handle.result()
    by_id = {t.id: t for t in result.tasks}
    assert by_id["big"].status == "succeeded", (by_id["big"].reason, by_id["big"].output_tail)
    assert by_id["small"].status == "succeeded", (by_id["small"].reason, by_id["small"].output_tail)
