"""A board that names no `base` starts from, and lands on, the remote's default branch (what
`origin/HEAD` names), here `master`: from `taskfleet run` (asked by the CLI) and from a board
started in code (asked by the worker). A board that names its base keeps it."""

from __future__ import annotations

from pathlib import Path

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from tests.conftest import git
from tests.user_cli import taskfleet

WRITE = 'printf "%s\\n" "$TASKFLEET_TASK_ID" > "$TASKFLEET_TASK_ID.txt"'
CHECK = 'test -f "$TASKFLEET_TASK_ID.txt"'


def master_remote(root: Path) -> tuple[Path, Path]:
    """A bare remote whose only (and default) branch is `master`, with a `dev` branch beside it,
    and a clone."""
    remote, seed, clone = root / "remote.git", root / "seed", root / "clone"
    git(root, "init", "-q", "--bare", "-b", "master", str(remote))
    seed.mkdir(parents=True)
    (seed / "README.md").write_text("on master\n")
    git(seed, "init", "-q", "-b", "master")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "seed")
    git(seed, "push", "-q", str(remote), "master", "master:dev")
    git(root, "clone", "-q", str(remote), str(clone))
    return remote, clone


async def test_taskfleet_run_without_base_uses_the_remotes_default_branch(
        server_address, task_queue, make_worker, tmp_path):
    remote, clone = master_remote(tmp_path)
    board = tmp_path / "board-1.md"
    board.write_text("| ID | Scope | Status | Branch | Verification |\n|---|---|---|---|---|\n"
                     "| M1 | write a file | [ ] | `task/M1` | prose |\n")
    async with make_worker():
        done = await taskfleet(server_address, "run", str(board), "--repo", str(clone), "--run",
                               WRITE, "--verify", CHECK, "--json", cwd=tmp_path,
                               task_queue=task_queue)
    assert done.returncode == 0, done.stderr
    master = git(remote, "rev-parse", "master")
    commit = git(remote, "rev-parse", "task/M1")
    assert git(remote, "rev-parse", f"{commit}^") == master  # started from master, pushed


async def test_a_board_started_in_code_without_base_is_resolved_by_the_worker(
        client, task_queue, make_worker, tmp_path):
    remote, clone = master_remote(tmp_path)
    tasks = [TaskSpec(id="Q1", run=WRITE, verify=CHECK, timeout_seconds=60)]
    async with make_worker():
        handle = await start_board(
            client, Board(tasks=tasks, name="nobase", land="queue",
                          queue_verify=CHECK.replace("$TASKFLEET_TASK_ID", "Q1"),
                          queue_max_wait_seconds=1), str(clone), task_queue=task_queue)
        result = await handle.result()
        named = Board(tasks=[TaskSpec(id="D1", run=WRITE, verify=CHECK, timeout_seconds=60)],
                      name="dev", base="dev")
        on_dev = await (
            await start_board(client, named, str(clone), task_queue=task_queue)).result()
    [task] = result.tasks
    assert task.status == "succeeded" and task.landed, task
    # through the merge queue of master: the task's commit is merged into master
    git(remote, "merge-base", "--is-ancestor", task.commit, "master")
    assert git(remote, "show", "master:Q1.txt") == "Q1"
    [dev] = on_dev.tasks
    assert (dev.landed
            and git(remote, "rev-parse", f"{dev.commit}^") == git(remote, "rev-parse", "dev"))
