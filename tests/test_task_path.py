"""The task-execution path as users meet it: paths, ids, locks, landing, crashes.

Real server, real worker processes, real git, real executors; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import DataConverter

from taskfleet.activities.task_runner import task_file_stem
from taskfleet.clients.orchestrator import progress, start_board
from taskfleet.core.boards import parse_markdown_board
from taskfleet.core.models.orchestrator import Board, OrchestratorResult, TaskSpec
from taskfleet.core.settings import TaskfleetSettings
from tests.conftest import (
    ROOT,
    WorkerProcess,
    eventually,
    git,
    hold_pushes,
    make_git_remote,
    save_history,
)

# one of the longest files: `make test` starts it early
pytestmark = pytest.mark.heavy(seconds=33, waits=True)

WRITE = 'mkdir -p out && printf "%s\\n" "$TASKFLEET_TASK_ID" > "out/$TASKFLEET_TASK_ID.txt"'
CHECK = 'grep -qx "$TASKFLEET_TASK_ID" "out/$TASKFLEET_TASK_ID.txt"'


def board(ids: list[str], run: str = WRITE, verify: str = CHECK, **kw) -> Board:
    tasks = [TaskSpec(id=i, scope=f"write {i}", branch=f"task/{i}", run=run, verify=verify,
                      timeout_seconds=60) for i in ids]
    return Board(tasks=tasks, name=kw.pop("name", "path"), **kw)


def registered_worktrees(clone: Path) -> list[str]:
    out = git(clone, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def files_of(remote: Path, commit: str) -> set[str]:
    return set(git(remote, "ls-tree", "-r", "--name-only", commit).split())


def test_per_task_file_names_never_collide():
    ids = ["T2.1", "T2.2", "T2.10", "a/b", "a-b", "a b", "X", "x", "x.lock", "x" * 200,
           "x" * 199 + "y"]
    assert len({task_file_stem(i) for i in ids}) == len(ids)
    assert all("/" not in task_file_stem(i) and " " not in task_file_stem(i) for i in ids)


def test_settings_paths_are_absolute_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the test process's own cwd, not a library under test
    monkeypatch.delenv("TASKFLEET_STATE_DIR", raising=False)
    s = TaskfleetSettings(templates_dir=Path("tpl"), lessons_path=Path("l.jsonl"))
    assert s.state_dir == tmp_path / ".taskfleet"
    assert s.templates_dir == tmp_path / "tpl" and s.lessons_path == tmp_path / "l.jsonl"
    assert s.worktrees_dir.is_absolute() and s.logs_dir.is_absolute()


async def test_worker_with_default_settings_started_elsewhere_runs_a_worktree_task(
    client: Client, server_address, task_queue, git_remote, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the worker stands in some other clone, as a user's shell often does
    git(elsewhere, "init", "-q")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKFLEET_")}
    log = open(tmp_path / "worker.log", "ab")
    proc = subprocess.Popen([sys.executable, str(ROOT / "worker.py"), "--address", server_address,
                             "--task-queue", task_queue], cwd=elsewhere, env=env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        async def started():
            assert proc.poll() is None, (tmp_path / "worker.log").read_text()
            assert "task_queue=" in (tmp_path / "worker.log").read_text()

        await eventually(started, timeout=60)
        handle = await start_board(client, board(["T1"]), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=0.2)
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        proc.send_signal(2)
        proc.wait(60)
        log.close()
    assert result.tasks[0].status == "succeeded" and result.tasks[0].landed, result.tasks
    assert (elsewhere / ".taskfleet" / "logs").is_dir()
    assert result.tasks[0].log_path.startswith(str(elsewhere / ".taskfleet"))
    assert not (git_remote.clone / ".taskfleet").exists()
    assert registered_worktrees(git_remote.clone) == [str(git_remote.clone)]


async def test_state_dir_inside_the_clone_is_refused_naming_both(
        client, make_worker, task_queue, git_remote):
    inside = TaskfleetSettings(state_dir=git_remote.clone / "state")
    async with make_worker(settings=inside):
        handle = await start_board(client, board(["T1"]), str(git_remote.clone),
                                   task_queue=task_queue)
        result = await handle.result()
    reason = result.tasks[0].reason
    assert result.tasks[0].status == "failed"
    assert (str(git_remote.clone / "state") in reason
            and f"clone {git_remote.clone}" in reason), reason


async def test_dotted_ids_of_a_markdown_board_run_in_parallel(
        client, make_worker, task_queue, git_remote, tmp_path):
    times = tmp_path / "times"
    times.mkdir()
    text = "| ID | Scope | Status | Branch | Verification |\n|---|---|---|---|---|\n" + "".join(
        f"| T2.{i} | part {i} | [ ] | `task/T2.{i}` | `{CHECK}` |\n" for i in range(1, 5)
    )
    run = (f'date +%s.%N > "{times}/$TASKFLEET_TASK_ID.start"; sleep 1; {WRITE}; '
           f'date +%s.%N > "{times}/$TASKFLEET_TASK_ID.end"')
    b = parse_markdown_board(text, "board.md", run=run, max_parallel=4)
    async with make_worker():
        handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=30)
        result = await handle.result()
    assert ([t.status for t in result.tasks] == ["succeeded"] * 4
            and all(t.landed for t in result.tasks))
    assert result.stats.max_running > 1, result.stats
    starts = [float((times / f"T2.{i}.start").read_text()) for i in range(1, 5)]
    ends = [float((times / f"T2.{i}.end").read_text()) for i in range(1, 5)]
    assert max(starts) < min(ends), (
        "the four tasks' time windows do not overlap: they ran one at a time")
    assert len({Path(t.log_path).name for t in result.tasks}) == 4


async def test_two_boards_with_the_same_ids_on_two_clones_all_succeed(
        client, make_worker, task_queue, tmp_path):
    clones = [make_git_remote(tmp_path / f"git{i}") for i in range(2)]
    ids = [f"T{i}" for i in range(1, 11)]
    async with make_worker():
        handles = [await start_board(
            client, board(ids, run=WRITE + " && sleep 0.5", max_parallel=10, name=f"b{i}"),
            str(fx.clone), task_queue=task_queue, heartbeat_timeout_seconds=5,
            git_max_batch_age_seconds=1) for i, fx in enumerate(clones)]
        results: list[OrchestratorResult] = await asyncio.gather(*(h.result() for h in handles))
    for fx, result in zip(clones, results):
        assert [t.status for t in result.tasks] == ["succeeded"] * 10, [
            t.reason for t in result.tasks]
        assert all(t.landed for t in result.tasks)
        for t in result.tasks:
            assert fx.remote_ref(f"task/{t.id}") == t.commit
        assert registered_worktrees(fx.clone) == [str(fx.clone)]


async def test_a_second_running_board_on_the_same_branches_is_refused_naming_the_first(
    client, make_worker, task_queue, git_remote, tmp_path
):
    gate = tmp_path / "gate"
    slow = f'while [ ! -e "{gate}" ]; do sleep 0.05; done; ' + WRITE
    async with make_worker():
        first = await start_board(
            client, board(["A", "B"], run=slow), str(git_remote.clone), task_queue=task_queue,
            workflow_id=f"first-{uuid.uuid4().hex[:6]}", git_max_batch_age_seconds=0.2)

        async def running():
            assert (await progress(first)).counts["running"] == 2

        await eventually(running, timeout=60)
        second = await start_board(client, board(["B", "C"]), str(git_remote.clone),
                                   task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as refused:
            await second.result()
        message = str(refused.value.cause)
        assert first.id in message and "task/B" in message and "still running" in message, message
        gate.touch()
        assert all(t.landed for t in (await first.result()).tasks)
        # a later run of the same board, once the first is done, is fine; its pushes wait at the
        # remote until the run waits for its landings under the land timeout
        held = tmp_path / "held"
        git_remote.install_hook("update", f'while [ ! -e "{held}" ]; do sleep 0.05; done\nexit 0\n')
        later = await start_board(client, board(["B", "C"]), str(git_remote.clone),
                                  task_queue=task_queue, git_max_batch_age_seconds=0.2)

        async def waiting_to_land():
            counts = (await progress(later)).counts
            assert (counts["succeeded"] == 2 and counts["running"] == 0
                    and counts["landed"] == 0), counts
            summaries = timer_summaries(await later.fetch_history())
            assert any(s.startswith("land timeout") for s in summaries), summaries

        await eventually(waiting_to_land, timeout=60)
        held.touch()
        assert all(t.landed for t in (await later.result()).tasks)
        save_history("orchestrator_claims_and_verified_landing",
                     (await later.fetch_history()).to_json())


def timer_summaries(history) -> list[str]:
    """The summaries of the timers a workflow started, as the Web UI shows them."""
    convert = DataConverter.default.payload_converter.from_payload
    return [convert(e.user_metadata.summary, str) for e in history.events
            if e.HasField("timer_started_event_attributes") and e.HasField("user_metadata")]


async def test_executor_that_switches_branch_still_lands_its_work_on_the_task_branch(
    client, make_worker, task_queue, git_remote
):
    b = board(["SW", "SC"])
    b.tasks[0].run = "git checkout -q -b elsewhere-$TASKFLEET_TASK_ID && " + WRITE
    b.tasks[1].run = ("git checkout -q -b own-$TASKFLEET_TASK_ID && " + WRITE + " && git add -A && "
                      "git -c user.name=a -c user.email=a@b commit -q -m 'agent commit'")
    async with make_worker():
        handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=0.2)
        result = await handle.result()
    for t in result.tasks:
        assert t.status == "succeeded" and t.landed, t
        assert git_remote.remote_ref(f"task/{t.id}") == t.commit
        assert f"out/{t.id}.txt" in files_of(git_remote.remote, t.commit)
    sc = result.tasks[1]
    assert (git(git_remote.remote, "log", "--format=%s", "-2", sc.commit).splitlines()[1]
            == "agent commit")


async def test_executor_that_checks_out_an_unrelated_commit_fails_clearly(
        client, make_worker, task_queue, git_remote):
    git(git_remote.clone, "checkout", "-q", "--orphan", "lonely")
    git(git_remote.clone, "commit", "-q", "--allow-empty", "-m", "lonely")
    git(git_remote.clone, "checkout", "-q", "main")
    b = board(["OFF"], run="git checkout -q --detach lonely && " + WRITE)
    async with make_worker():
        result = await (
            await start_board(client, b, str(git_remote.clone), task_queue=task_queue)).result()
    t = result.tasks[0]
    assert t.status == "failed" and not t.landed and "does not contain the base" in t.reason, t
    assert not git_remote.remote_ref("task/OFF")


async def test_rerun_with_the_same_id_starts_fresh_from_the_moved_base(
        client, make_worker, task_queue, git_remote, tmp_path):
    counter = tmp_path / "runs"
    b = board(["R1"], run=f'echo x >> "{counter}"; ' + WRITE)
    b.tasks[0].refresh = True
    workflow_id = f"same-{uuid.uuid4().hex[:6]}"
    async with make_worker():
        first = await (
            await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                              workflow_id=workflow_id, git_max_batch_age_seconds=0.2)).result()
        # main moves on the remote and in the clone
        git(git_remote.clone, "commit", "-q", "--allow-empty", "-m", "main moved")
        git(git_remote.clone, "push", "-q", "origin", "main")
        new_main = git(git_remote.clone, "rev-parse", "main")
        second = await (
            await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                              workflow_id=workflow_id, git_max_batch_age_seconds=0.2)).result()
        # once more, from the result cache this time (same base tree): still on today's base
        git(git_remote.clone, "commit", "-q", "--allow-empty", "-m", "main moved again")
        git(git_remote.clone, "push", "-q", "origin", "main")
        newest_main = git(git_remote.clone, "rev-parse", "main")
        b.tasks[0].refresh = False
        third = await (
            await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                              workflow_id=workflow_id, git_max_batch_age_seconds=0.2)).result()
    assert first.tasks[0].landed and second.tasks[0].landed, (first.tasks, second.tasks)
    assert git(git_remote.remote, "rev-parse", f"{second.tasks[0].commit}^") == new_main
    assert third.tasks[0].cache_hit and third.tasks[0].landed, third.tasks
    assert len(counter.read_text().split()) == 2, (
        "the second run did not execute its task, or the third did")
    assert git(git_remote.remote, "rev-parse", f"{third.tasks[0].commit}^") == newest_main
    assert git_remote.remote_ref("task/R1") == third.tasks[0].commit


async def test_cancel_while_the_landing_push_is_in_flight_reports_it_landed(
    client, make_worker, task_queue, git_remote, tmp_path
):
    started, release = hold_pushes(git_remote, tmp_path)
    async with make_worker():
        handle = await start_board(client, board(["P1"]), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=0.1)

        async def pushing():
            assert started.exists() and (await progress(handle)).counts["succeeded"] == 1

        await eventually(pushing, timeout=60)
        await handle.cancel()
        release.touch()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        p = await progress(handle)
        save_history("orchestrator_cancel_while_landing", (await handle.fetch_history()).to_json())
    assert git_remote.remote_ref("task/P1")
    assert [t.landed for t in p.tasks] == [True], p


async def test_executors_die_with_a_killed_worker_and_the_retry_lands_only_its_own_files(
    client, server_address, task_queue, git_remote, tmp_path
):
    attempts, pid_file, marker = (tmp_path / "attempts", tmp_path / "first.pid",
                                  tmp_path / "first-alive")
    run = (
        f'n=$(cat "{attempts}" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{attempts}"; '
        f'if [ $n = 1 ]; then echo $$ > "{pid_file}"; '
        f'while true; do date > first-attempt.txt; date >> "{marker}"; sleep 0.1; done; '
        f'else echo retry > retry-attempt.txt; fi'
    )
    b = board(["K1"], run=run, verify="test -f retry-attempt.txt")
    state = tmp_path / "worker-state"
    args = ("--address", server_address, "--task-queue", task_queue, "--state-dir", str(state))
    first = WorkerProcess(*args, log=tmp_path / "w1.log")
    await first.wait_started()
    handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                               heartbeat_timeout_seconds=3, git_max_batch_age_seconds=0.2)

    async def executing():
        assert pid_file.exists() and marker.exists()

    await eventually(executing, timeout=60)
    # Found by its command line (which names the marker file): inside its PID namespace the
    # executor's `$$` is not its pid on this machine.
    assert _with_cmdline(str(marker)), "the executor is not visible in /proc"
    first.kill_group()  # the worker's own group only: the executor has its own session

    async def executor_gone():
        assert _with_cmdline(str(marker)) == []

    await eventually(executor_gone, timeout=5)
    size = marker.stat().st_size
    second = WorkerProcess(*args, log=tmp_path / "w2.log")
    try:
        await second.wait_started()
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        second.kill_group()
    assert marker.stat().st_size == size, (
        "the first attempt's executor kept writing after its worker died")
    t = result.tasks[0]
    assert t.status == "succeeded" and t.landed, t
    files = files_of(git_remote.remote, t.commit)
    assert "retry-attempt.txt" in files and "first-attempt.txt" not in files, files


async def test_an_outcome_sent_by_another_client_with_the_run_s_op_id_is_not_credited(
    client, make_worker, task_queue, git_remote, tmp_path
):
    from taskfleet.core.ids import landing_op_id
    from taskfleet.core.models.git_batch import GitBatchStats, GitOpsLanded, OpOutcome
    from taskfleet.core.names import QUERY_STATS, SIGNAL_GIT_OPS_LANDED
    from taskfleet.workflows.orchestrator.landings import (
        batcher_id,  # the batcher of this queue (C2)
    )

    git_remote.install_hook(
        "pre-receive",
        'while read old new ref; do [ "$ref" = refs/heads/task/T1 ] && exit 1; done\nexit 0\n')
    gate = tmp_path / "gate"
    b = board(["T1", "T2"])
    b.tasks[1].run = f'while [ ! -e "{gate}" ]; do sleep 0.05; done; ' + WRITE
    async with make_worker():
        handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=0.2)

        batcher = client.get_workflow_handle(
            batcher_id(str(git_remote.clone), "origin", task_queue))

        async def t1_refused_by_the_remote():
            p = await progress(handle)
            assert p.counts["succeeded"] == 1 and p.counts["running"] == 1, p.counts
            stats = await batcher.query(QUERY_STATS, result_type=GitBatchStats)
            assert stats.failed_ops == 1, stats

        await eventually(t1_refused_by_the_remote, timeout=60)
        first_run = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
        op_id = landing_op_id(f"{handle.id}@{first_run}", "T1")
        forged = GitOpsLanded(
            batch_id="forged", repo=str(git_remote.clone), remote="origin",
            outcomes=[OpOutcome(op_id=op_id, op_type="push", branch="task/T1", status="landed",
                                commit="f" * 40, branch_commit="f" * 40)])
        await handle.signal(SIGNAL_GIT_OPS_LANDED, forged)
        gate.touch()
        result = await handle.result()
    by_id = {t.id: t for t in result.tasks}
    assert not by_id["T1"].landed and not git_remote.remote_ref("task/T1"), by_id["T1"]
    assert by_id["T2"].landed


async def test_a_prompt_of_any_size_reaches_the_executor_by_file(
        client, make_worker, task_queue, git_remote):
    b = board(["BIG"], run='test "$(wc -c < "$TASKFLEET_PROMPT_FILE")" -ge 200000'
                           ' && [ -z "${TASKFLEET_PROMPT+set}" ]', verify="true")
    b.tasks[0].template = "{{ 'x' * 200000 }}"
    b.tasks[0].worktree = False
    async with make_worker():
        result = await (
            await start_board(client, b, str(git_remote.clone), task_queue=task_queue)).result()
    assert result.tasks[0].status == "succeeded", result.tasks[0]


async def test_a_reused_slot_starts_each_task_from_a_clean_base(
        client, make_worker, task_queue, git_remote):
    """One slot, three tasks in turn: the 2nd and 3rd only move their branch onto the scrubbed slot
    (no checkout), and still see none of the task before them."""
    only_mine = CHECK + (' && test "$(ls out)" = "$TASKFLEET_TASK_ID.txt"'
                         ' && test "$(git rev-parse HEAD^0)" = "$(git rev-parse main)"')
    b = board(["S1", "S2", "S3"], verify=only_mine, max_parallel=1)
    base = git(git_remote.clone, "rev-parse", "main")
    async with make_worker():
        result = await (await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                          git_max_batch_age_seconds=0.2)).result()
    assert [t.status for t in result.tasks] == ["succeeded"] * 3, [
        (t.id, t.reason) for t in result.tasks]
    for task in result.tasks:
        assert task.landed, task
        assert git(git_remote.remote, "rev-parse", f"{task.commit}^") == base
        assert {f for f in files_of(git_remote.remote, task.commit) if f.startswith("out/")} == {
            f"out/{task.id}.txt"}
    assert registered_worktrees(git_remote.clone) == [str(git_remote.clone)]


async def test_index_flags_and_sparse_checkout_left_by_an_executor_never_reach_the_next_task(
    client, make_worker, task_queue, git_remote
):
    """`reset --hard` and `clean` keep a slot's assume-unchanged and skip-worktree bits and its own
    sparse-checkout: a slot an executor left so is discarded, and the next tasks get a plain
    checkout of the base whose every tracked file they can change and commit."""
    flags = ('for f in $(git ls-files); do echo x >> "$f"; done; '
             'git update-index --assume-unchanged "$(git ls-files | head -1)"; '
             'git update-index --skip-worktree "$(git ls-files | tail -1)"')
    sparse = "git sparse-checkout set --no-cone /nothing/"
    # every tracked file present, unflagged and as the base has it; then change them all
    plain = ('test -z "$(git status --porcelain)"'
             ' && test -z "$(git ls-files -v | grep -v \'^H \')"'
             ' && for f in $(git ls-files); do test -f "$f" || exit 1; done')
    change = 'for f in $(git ls-files); do echo "$TASKFLEET_TASK_ID" >> "$f"; done'
    tasks = [TaskSpec(id="F1", run=flags, verify="true"),
             TaskSpec(id="F2", run=sparse, verify="true")]
    tasks += [TaskSpec(id=i, run=f"{plain} && {change}", verify="true") for i in ("F3", "F4")]
    base = git(git_remote.clone, "rev-parse", "main")
    tracked = set(git(git_remote.clone, "ls-files").split())
    async with make_worker():
        result = await (await start_board(client, Board(tasks=tasks, name="flags", max_parallel=1),
                                          str(git_remote.clone), task_queue=task_queue,
                                          git_max_batch_age_seconds=0.2)).result()
    outcomes = {t.id: t for t in result.tasks}
    assert all(t.status == "succeeded" and t.landed
               for t in result.tasks), [(t.id, t.reason) for t in result.tasks]
    # a plain checkout, and the commit holds every change the task made
    for task_id in ("F3", "F4"):
        changed = git(git_remote.remote, "diff", "--name-only", base,
                      outcomes[task_id].commit).split()
        assert set(changed) == tracked, (task_id, changed)
    assert registered_worktrees(git_remote.clone) == [str(git_remote.clone)]


async def test_a_process_that_left_its_task_s_group_is_stopped_with_the_task(
        client, make_worker, task_queue, git_remote):
    """A `setsid` daemon escapes the process-group kill; it still carries the task's token, so it is
    killed when the task's commands end, and never writes into the next task's checkout."""
    marker = f"straggler-{uuid.uuid4().hex[:8]}"
    daemon = (f"setsid sh -c 'while :; do echo {marker} > leak.txt; sleep 0.05; done' </dev/null "
              ">/dev/null 2>&1 & echo one > one.txt")
    tasks = [TaskSpec(id="L1", run=daemon, verify="true"),
             # and git maintenance an executor's git starts runs in the foreground, never detached
             TaskSpec(id="L2", run="echo two > two.txt",
                      verify='test ! -e leak.txt'
                             ' && test "$(git config --get gc.autoDetach)" = false')]
    async with make_worker():
        result = await (await start_board(client, Board(tasks=tasks, name="leak", max_parallel=1),
                                          str(git_remote.clone), task_queue=task_queue,
                                          git_max_batch_age_seconds=0.2)).result()
    assert [t.status for t in result.tasks] == ["succeeded", "succeeded"], [
        (t.id, t.reason) for t in result.tasks]
    assert "leak.txt" not in files_of(git_remote.remote, result.tasks[1].commit)
    alive = [p for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _cmdline(p)]
    assert alive == [], f"still running: {alive}"


def _with_cmdline(text: str) -> list[str]:
    """Live (not zombie) processes whose command line contains `text`."""
    alive = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and text.encode() in _cmdline(pid):
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
            except OSError:
                pass
    return alive


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


async def test_a_stale_ref_lock_fails_the_task_once_naming_the_file(
        client, make_worker, task_queue, git_remote, monkeypatch):
    """A lock file nobody lets go of: after git's wait (shortened here from a minute) the task fails
    at once, not three attempts later, with a reason that names the file; the other task lands."""
    from taskfleet.activities.git import git_async

    monkeypatch.setattr(git_async, "LOCK_RETRY_SECONDS", 0.5)
    lock = git_remote.clone / ".git" / "refs" / "heads" / "task" / "K1.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    async with make_worker():
        handle = await start_board(client, board(["K1", "K2"]), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=0.2)
        result = await handle.result()
    outcomes = {t.id: t for t in result.tasks}
    assert outcomes["K2"].status == "succeeded" and outcomes["K2"].landed
    assert (outcomes["K1"].status == "failed"
            and str(lock) in outcomes["K1"].reason), outcomes["K1"].reason
    attempts = [e for e in [e async for e in handle.fetch_history_events()]
                if e.HasField("activity_task_started_event_attributes")
                and e.activity_task_started_event_attributes.attempt > 1]
    assert attempts == []  # no retry of a stale lock


async def test_a_task_whose_branch_a_person_has_checked_out_fails_naming_where(
        client, make_worker, task_queue, git_remote):
    """The user has `task/P1` checked out in the clone (looking at an earlier result): moving it to
    the base would turn their checkout into staged changes. The task fails once, saying where; the
    board's other task lands, and the user's checkout is untouched."""
    git(git_remote.clone, "checkout", "-q", "-b", "task/P1")
    (git_remote.clone / "mine.txt").write_text("the user's work\n")
    git(git_remote.clone, "add", "mine.txt")
    git(git_remote.clone, "commit", "-qm", "user work")
    mine = git(git_remote.clone, "rev-parse", "HEAD")
    git(git_remote.clone, "branch", "-f", "main", "HEAD~1")  # main stays the base the remote has
    async with make_worker():
        handle = await start_board(client, board(["P1", "P2"]), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=0.2)
        result = await handle.result()
    outcomes = {t.id: t for t in result.tasks}
    assert outcomes["P2"].status == "succeeded" and outcomes["P2"].landed
    assert (outcomes["P1"].status == "failed"
            and str(git_remote.clone) in outcomes["P1"].reason), outcomes["P1"].reason
    assert git(git_remote.clone, "rev-parse", "task/P1") == mine
    assert git(git_remote.clone, "symbolic-ref", "HEAD") == "refs/heads/task/P1"
    assert git(git_remote.clone, "status", "--porcelain") == ""


async def test_a_clone_with_its_own_worktree_config_still_reuses_its_slots(
        client, make_worker, task_queue, git_remote):
    """git copies the clone's `config.worktree` into each new worktree: that is how the slot was
    made, not something a task left, so the slot is still reused task after task."""
    git(git_remote.clone, "config", "extensions.worktreeConfig", "true")
    git(git_remote.clone, "config", "--worktree", "taskfleet.test", "mine")
    where = 'mkdir -p out && printf "%s\\n" "$TASKFLEET_WORKTREE" > "out/$TASKFLEET_TASK_ID.txt"'
    async with make_worker():
        result = await (await start_board(
            client, board(["R1", "R2", "R3"], run=where, verify="true", max_parallel=1),
            str(git_remote.clone), task_queue=task_queue, git_max_batch_age_seconds=0.2)).result()
    assert all(t.status == "succeeded" and t.landed
               for t in result.tasks), [(t.id, t.reason) for t in result.tasks]
    slots = {git(git_remote.remote, "show", f"{t.commit}:out/{t.id}.txt") for t in result.tasks}
    assert len(slots) == 1, slots  # one slot, reused by all three
