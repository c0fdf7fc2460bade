"""Many pods, one repository: workers that share a clone but not their state dirs.

Each pod is a worker process in its own mount namespace with a private tmpfs at the same state-dir
path (tests/pods.py); the clone, its bare remote and the lessons folder are shared. Boards run on
all pods at once, one pod is SIGKILLed mid-run and restarted with a fresh state dir.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.activities.pods.shared_clone import registrations
from taskfleet.clients.orchestrator import progress, start_board
from taskfleet.core.models.orchestrator import Board, OrchestratorResult, TaskSpec
from tests.conftest import GitRemoteFixture, eventually, git
from tests.pods import Pod, requires_pods

# one of the longest files: `make test` starts it early
pytestmark = pytest.mark.heavy(seconds=45, waits=True)

WRITE = 'mkdir -p out && printf "%s\\n" "$TASKFLEET_TASK_ID" > "out/$TASKFLEET_TASK_ID.txt"'
CHECK = 'grep -qx "$TASKFLEET_TASK_ID" "out/$TASKFLEET_TASK_ID.txt"'


def fleet(tmp_path: Path, address: str, queues: list[str], **env: str) -> list[Pod]:
    state = tmp_path / "state"  # the same path in every pod; a private tmpfs in each
    lessons = tmp_path / "lessons"
    lessons.mkdir(exist_ok=True)
    return [Pod(f"pod-{i}", state_dir=state, address=address, task_queue=queue,
                log=tmp_path / f"pod-{i}.log", env={"TASKFLEET_LESSONS_DIR": str(lessons), **env})
            for i, queue in enumerate(queues)]


def presence_key(pod: Pod) -> str:
    """The presence lease key the pod's worker logged at start
    (its worktrees' lock reasons name it)."""
    found = re.findall(rf"presence lease taskfleet-worker/{pod.name}/([0-9a-f]+) held",
                       pod.output())
    assert found, pod.output()[-2000:]
    return found[-1]


def assert_clean(fx: GitRemoteFixture) -> None:
    for repo in (fx.clone, fx.remote):
        fsck = subprocess.run(["git", "fsck", "--no-progress", "--strict"], cwd=repo,
                              capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr


@requires_pods
@pytest.mark.timeout(600)
async def test_five_boards_on_five_pods_land_every_task_once_with_a_pod_killed(
    client: Client, server_address: str, task_queue: str, git_remote: GitRemoteFixture,
    tmp_path: Path
):
    fx = git_remote
    runs = tmp_path / "runs.log"  # on the shared file system: every execution of every task
    pods = fleet(tmp_path, server_address, [task_queue] * 5)
    try:
        for pod in pods:
            await pod.wait_started()
        boards = []
        for b in range(5):
            tasks = [
                TaskSpec(id=f"b{b}t{i}", branch=f"fleet/b{b}/t{i}", task_type="fleet",
                         timeout_seconds=60,
                         run=f'echo "$TASKFLEET_TASK_ID" >> "{runs}"; sleep 1; ' + WRITE,
                         verify=CHECK)
                for i in range(6)
            ]
            boards.append(Board(tasks=tasks, name=f"fleet-{b}", max_parallel=3))
        handles = await asyncio.gather(
            *(start_board(client, b, str(fx.clone), task_queue=task_queue,
                          heartbeat_timeout_seconds=3, git_max_batch_age_seconds=0.5)
              for b in boards))

        async def some_landed() -> list[str]:
            landed = []
            for handle in handles:
                p = await progress(handle)
                landed += [t.id for t in p.tasks if t.landed]
            assert 3 <= len(landed) < 30, len(landed)
            return landed

        landed_before = await eventually(some_landed, timeout=120)
        victim = pods[1]
        dead_key = presence_key(victim)
        victim.kill()
        victim.start()  # rescheduled: same pod name, fresh state dir
        await victim.wait_started()
        results: list[OrchestratorResult] = await asyncio.wait_for(
            asyncio.gather(*(h.result() for h in handles)), 240)

        for result in results:
            assert all(t.status == "succeeded" and t.landed for t in result.tasks), result.tasks
            for t in result.tasks:
                b, i = t.id[1:].split("t")
                assert fx.remote_ref(f"fleet/b{b}/t{i}") == t.commit
                assert git(fx.remote, "rev-list", "--count", f"main..fleet/b{b}/t{i}") == "1"
                assert git(fx.remote, "show", f"{t.commit}:out/{t.id}.txt") == t.id
        executions = runs.read_text().split()
        for task_id in landed_before:
            assert executions.count(task_id) == 1, (task_id, executions.count(task_id))
        assert "InvalidGitRepositoryError" not in "".join(p.output() for p in pods)

        # The killed pod's worktrees are removed by whoever takes its expired presence lease.
        async def no_dead_registrations() -> None:
            left = [r.path.name for r in registrations(fx.clone) if r.lease == dead_key]
            assert not left, left

        await eventually(no_dead_registrations, timeout=90)
    finally:
        for pod in pods:
            pod.stop()
    assert registrations(fx.clone) == []  # each pod removed its own at stop
    assert git(fx.clone, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert_clean(fx)


@requires_pods
@pytest.mark.timeout(300)
async def test_a_lesson_recorded_on_pod_a_is_in_a_prompt_on_pod_b(
    client: Client, server_address: str, task_queue: str, git_remote: GitRemoteFixture,
    tmp_path: Path
):
    fx = git_remote
    queue_a, queue_b = f"{task_queue}-a", f"{task_queue}-b"  # so each board runs on one known pod
    pods = fleet(tmp_path, server_address, [queue_a, queue_b])
    try:
        for pod in pods:
            await pod.wait_started()
        failing = Board(name="on-a", tasks=[TaskSpec(
            id="a1", branch="fleet/a1", task_type="fleet-lessons", timeout_seconds=60,
            run=WRITE, verify='echo "the frobnicator 42 is missing" >&2; exit 3',
        )])
        result = await (
            await start_board(client, failing, str(fx.clone), task_queue=queue_a)).result()
        assert result.tasks[0].status == "failed"
        assert any(Path(tmp_path / "lessons").glob("pod-0.jsonl")), "pod A wrote no journal"

        reading = Board(name="on-b", tasks=[
            TaskSpec(id="b1", branch="fleet/b1", task_type="fleet-lessons", timeout_seconds=60,
                     run='mkdir -p out && cp "$TASKFLEET_PROMPT_FILE" out/prompt.md',
                     verify="grep -q frobnicator out/prompt.md")])
        result = await (await start_board(client, reading, str(fx.clone), task_queue=queue_b,
                                          git_max_batch_age_seconds=0.2)).result()
        assert result.tasks[0].status == "succeeded", result.tasks[0]
        assert "frobnicator" in git(fx.remote, "show", f"{result.tasks[0].commit}:out/prompt.md")
        assert not (tmp_path / "lessons" / "pod-1.jsonl").exists()  # pod B only read
    finally:
        for pod in pods:
            pod.stop()
