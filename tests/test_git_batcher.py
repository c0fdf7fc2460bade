"""GitBatchWorkflow on a real server, landing on a real bare remote that counts its pushes."""

from __future__ import annotations

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowUpdateFailedError

from taskfleet.clients.git_batcher import GitBatcherClient, op_payload
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp, GitOpsLanded, OpOutcome
from taskfleet.testing import make_git_remote
from tests.conftest import GitRemoteFixture, eventually, git, landed_ops, save_history


@workflow.defn(name="LandedListener", sandboxed=False)
class LandedListener:
    """Stands in for an orchestrator: collects the `git_ops_landed` outcomes sent to it."""

    def __init__(self) -> None:
        self.got: list[OpOutcome] = []
        self.batches: list[str] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name="git_ops_landed")
    def landed(self, message: GitOpsLanded) -> None:
        self.got.extend(message.outcomes)
        self.batches.append(message.batch_id)

    @workflow.query
    def outcomes(self) -> list[OpOutcome]:
        return self.got

    @workflow.query
    def batch_ids(self) -> list[str]:
        return self.batches


def batcher(client: Client, fx: GitRemoteFixture, task_queue: str, **config) -> GitBatcherClient:
    # only size or an explicit flush, unless a test says
    config.setdefault("max_batch_age_seconds", 3600)
    return GitBatcherClient(client, GitBatchConfig(repo=str(fx.clone), **config), task_queue)


def commit_op(fx: GitRemoteFixture, branch: str, op_id: str = "", **kw) -> tuple[GitOp, str]:
    """A worktree on a new branch with one changed file; returns the op and the file's content."""
    wt = fx.worktree(branch)
    content = f"work of {branch}\n"
    fx.change(wt, f"{branch.replace('/', '_')}.txt", content)
    return (GitOp(op_type="commit", branch=branch, message=f"work on {branch}", worktree=str(wt),
                  id=op_id, **kw), content)


def remote_file(fx: GitRemoteFixture, branch: str, name: str) -> str:
    return git(fx.remote, "show", f"refs/heads/{branch}:{name}")


@pytest.mark.smoke
async def test_ten_ops_two_pushes(client: Client, make_worker, task_queue,
                                  git_remote: GitRemoteFixture):
    gb = batcher(client, git_remote, task_queue, max_batch_size=5)
    ops = [commit_op(git_remote, f"task/t{i}")[0] for i in range(10)]
    async with make_worker():
        for op in ops:
            await gb.enqueue(op)
        status = await landed_ops(gb, 10)
        stats = await gb.stats()  # the counters alone, as the `stats` query gives them
        save_history("git_batcher_ten_ops", (await gb.handle.fetch_history()).to_json())
    assert stats == status.stats
    assert git_remote.pushes() == 2
    for i in range(10):
        branch = f"task/t{i}"
        assert git_remote.remote_ref(branch) == git(git_remote.clone, "rev-parse", branch)
        assert remote_file(git_remote, branch, f"task_t{i}.txt") == f"work of {branch}"
    assert status.stats.total_ops == 10
    assert status.stats.total_batches == 2
    assert status.stats.network_savings == 8
    assert status.stats.pushes == 2
    assert [b.status for b in status.executed_batches] == ["completed", "completed"]
    assert all(o.status == "landed" for b in status.executed_batches for o in b.outcomes)


async def test_listeners_hear_of_each_batch_in_order_from_its_push(
    client: Client, make_worker, task_queue, git_remote
):
    """Each op's `reply_to` gets `git_ops_landed` for its batch, in the order the batches ran,
    from the push activity itself as soon as the push is done: the batcher signals no one it
    reached, so no trip through the batcher's workflow sits between a push and its listeners."""
    gb = batcher(client, git_remote, task_queue, max_batch_size=2)
    listener_ids = [f"listener-{i}-{task_queue}" for i in range(2)]
    for i in range(6):  # queued before a worker runs: the first workflow task cuts three batches
        await gb.enqueue(
            commit_op(git_remote, f"told/{i}", op_id=f"told-{i}", reply_to=listener_ids[i % 2])[0])
    async with make_worker(workflows=[LandedListener]):
        listeners = [
            await client.start_workflow(LandedListener.run, id=listener_id, task_queue=task_queue)
            for listener_id in listener_ids
        ]
        status = await landed_ops(gb, 6)

        async def all_told() -> list[list[str]]:
            told = [await listener.query(LandedListener.batch_ids) for listener in listeners]
            assert all(len(ids) == 3 for ids in told), told
            return told

        told = await eventually(all_told)
        outcomes = [await listener.query(LandedListener.outcomes) for listener in listeners]
        history = await gb.handle.fetch_history()
        save_history("git_batcher_replies_from_push", history.to_json())
    batch_order = [b.id for b in status.executed_batches]
    assert told == [batch_order, batch_order]
    assert [o.op_id for o in outcomes[0]] == ["told-0", "told-2", "told-4"]
    assert [o.op_id for o in outcomes[1]] == ["told-1", "told-3", "told-5"]
    assert all(o.status == "landed" for both in outcomes for o in both)
    kinds = [event.WhichOneof("attributes") for event in history.events]
    assert kinds.count("activity_task_completed_event_attributes") == 3
    assert "signal_external_workflow_execution_initiated_event_attributes" not in kinds


async def test_a_listener_that_is_gone_is_left_to_the_batcher_and_blocks_nothing(
    client: Client, make_worker, task_queue, git_remote
):
    """The push activity cannot reach a `reply_to` that does not exist: the batcher tries it once
    itself (the signal fails, recorded in its history), tells the live listener nothing twice,
    and the next batch lands as usual."""
    gb = batcher(client, git_remote, task_queue, max_batch_size=2)
    live, gone = f"listener-live-{task_queue}", f"listener-gone-{task_queue}"
    async with make_worker(workflows=[LandedListener]):
        listener = await client.start_workflow(LandedListener.run, id=live, task_queue=task_queue)
        await gb.enqueue(commit_op(git_remote, "gone/0", op_id="gone-0", reply_to=gone)[0])
        await gb.enqueue(commit_op(git_remote, "gone/1", op_id="gone-1", reply_to=live)[0])
        await landed_ops(gb, 2)
        await gb.enqueue(commit_op(git_remote, "gone/2", op_id="gone-2", reply_to=live)[0])
        await gb.enqueue(commit_op(git_remote, "gone/3", op_id="gone-3")[0])
        status = await landed_ops(gb, 4)

        async def told_twice() -> list[str]:
            batches = await listener.query(LandedListener.batch_ids)
            assert len(batches) == 2, batches
            return batches

        batches = await eventually(told_twice)
        outcomes = await listener.query(LandedListener.outcomes)
        history = await gb.handle.fetch_history()
    assert batches == [b.id for b in status.executed_batches]
    assert [o.op_id for o in outcomes] == ["gone-1", "gone-2"]
    assert all(o.status == "landed" for b in status.executed_batches for o in b.outcomes)
    kinds = [event.WhichOneof("attributes") for event in history.events]
    assert kinds.count("signal_external_workflow_execution_initiated_event_attributes") == 1
    assert kinds.count("signal_external_workflow_execution_failed_event_attributes") == 1


async def test_age_flush_lands_with_one_push(client: Client, make_worker, task_queue, git_remote):
    gb = batcher(client, git_remote, task_queue, max_batch_size=10, max_batch_age_seconds=1)
    async with make_worker():
        for i in range(3):
            await gb.enqueue(commit_op(git_remote, f"age/{i}")[0])
        status = await landed_ops(gb, 3)
    assert git_remote.pushes() == 1
    assert status.stats.total_batches == 1
    assert all(git_remote.remote_ref(f"age/{i}") for i in range(3))


async def test_a_flush_after_named_ops_waits_until_all_are_queued_then_lands_them_in_one_push(
    client: Client, make_worker, task_queue, git_remote
):
    """`flush({"after": [op ids]})`, as a board's last tasks send it: nothing is cut while one of
    the named ops is missing, and the batch leaves as soon as the last arrives (no size, no age)."""
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    ops = [commit_op(git_remote, f"together/{i}", op_id=f"together-{i}")[0] for i in range(3)]
    async with make_worker():
        await gb.enqueue(ops[0])
        await gb.handle.signal("flush", {"after": [op.id for op in ops]})
        await gb.enqueue(ops[1])
        waiting = await gb.status()  # a query sees every signal sent before it
        assert [op.id for op in waiting.queue] == ["together-0", "together-1"], waiting
        assert not waiting.pending_batches and waiting.stats.total_batches == 0, waiting
        await gb.enqueue(ops[2])
        status = await landed_ops(gb, 3)
        # named ops that are all in already: a plain flush
        await gb.enqueue(commit_op(git_remote, "together/late", op_id="together-late")[0])
        await gb.handle.signal("flush", {"after": ["together-late", "together-0"]})
        status = await landed_ops(gb, 4)
        save_history("git_batcher_flush_after", (await gb.handle.fetch_history()).to_json())
    assert git_remote.pushes() == 2
    assert [len(b.ops) for b in status.executed_batches] == [3, 1]


async def test_a_flush_with_input_it_cannot_read_flushes_at_once(
        client: Client, make_worker, task_queue, git_remote):
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    async with make_worker():
        await gb.enqueue(commit_op(git_remote, "odd/0")[0])
        await gb.handle.signal("flush", {"after": "odd/0"})  # not a list
        await landed_ops(gb, 1)
        await gb.enqueue(commit_op(git_remote, "odd/1")[0])
        await gb.handle.signal("flush", {"after": [7]})  # not op ids
        status = await landed_ops(gb, 2)
    assert status.stats.total_batches == 2 and git_remote.pushes() == 2


async def test_an_op_reaching_an_idle_batcher_lands_at_its_age(
        client: Client, make_worker, task_queue, git_remote):
    """After a flush the batcher holds nothing and waits with no timer; a lone op sent then (as a
    person does with the temporal CLI) must still land once it is max_batch_age_seconds old."""
    gb = batcher(client, git_remote, task_queue, max_batch_size=10, max_batch_age_seconds=1)
    async with make_worker():
        await gb.enqueue(commit_op(git_remote, "idle/first")[0])
        await gb.flush()
        await landed_ops(gb, 1)
        await gb.enqueue(commit_op(git_remote, "idle/lone")[0])
        status = await landed_ops(gb, 2)
        save_history("git_batcher_idle_arrival", (await gb.handle.fetch_history()).to_json())
    assert git_remote.pushes() == 2
    assert status.stats.total_batches == 2
    assert git_remote.remote_ref("idle/lone") == git(git_remote.clone, "rev-parse", "idle/lone")


async def test_manual_flush_by_signal_and_update(client: Client, make_worker,
                                                 task_queue, git_remote):
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    async with make_worker():
        await gb.enqueue(commit_op(git_remote, "manual/a")[0])
        await gb.enqueue(commit_op(git_remote, "manual/b")[0])
        await gb.flush()
        await landed_ops(gb, 2)
        assert git_remote.pushes() == 1

        op_id = await gb.submit(commit_op(git_remote, "manual/c", op_id="c-1")[0])
        assert op_id == "c-1"
        result = await gb.flush_now()
    assert result.status == "completed"
    assert [(o.op_id, o.status) for o in result.outcomes] == [("c-1", "landed")]
    assert git_remote.pushes() == 2
    assert git_remote.remote_ref("manual/c") == result.outcomes[0].commit


async def test_repeated_op_id_lands_once(client: Client, make_worker, task_queue, git_remote):
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    op, _ = commit_op(git_remote, "dup/a", op_id="same-id")
    async with make_worker():
        await gb.enqueue(op)
        await gb.enqueue(op)
        assert await gb.submit(op) == "same-id"
        result = await gb.flush_now()
        status = await gb.status()
    assert [o.op_id for o in result.outcomes] == ["same-id"]
    assert status.stats.total_ops == 1
    assert git(git_remote.remote, "rev-list", "--count", "main..dup/a") == "1"


BAD_OPS = [
    ({"op_type": "commit", "branch": "-rf", "message": "m", "worktree": "/tmp"}, "starts with '-'"),
    ({"op_type": "push", "branch": "bad..name"}, "'..'"),
    ({"op_type": "rebase", "branch": "x"}, "op_type 'rebase' is not one of"),
    ({"branch": "x"}, "missing field 'op_type'"),
    ({"op_type": "commit", "branch": "ok", "message": "m", "worktree": "/tmp",
      "files": ["../etc/passwd"]}, "outside the repository"),
    ({"op_type": "push", "branch": "ok", "colour": "red"}, "unknown field(s) colour"),
    ("just a string", "must be a JSON object"),
]


async def test_bad_ops_by_signal_are_rejected_and_valid_ops_land(
        client: Client, make_worker, task_queue, git_remote):
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    async with make_worker():
        await gb.enqueue(commit_op(git_remote, "good/1")[0])
        for raw, _ in BAD_OPS:
            await gb.enqueue(raw)
        await gb.enqueue(commit_op(git_remote, "good/2")[0])
        result = await gb.flush_now()
        status = await gb.status()
    assert [o.status for o in result.outcomes] == ["landed", "landed"]
    assert git_remote.remote_ref("good/1") and git_remote.remote_ref("good/2")
    assert len(status.rejected) == len(BAD_OPS)
    for rejected, (raw, reason) in zip(status.rejected, BAD_OPS):
        assert rejected.op == raw
        assert reason in rejected.reason
    assert status.stats.rejected_ops == len(BAD_OPS)


async def test_a_list_of_ops_in_one_signal_lands_and_a_bad_one_is_refused_alone(
    client: Client, make_worker, task_queue, git_remote
):
    """`enqueue` takes a list (what GitBatcherClient sends when it holds several ops): each op is
    taken or refused on its own; an empty or oversized list is refused whole, as one rejection."""
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    good = [op_payload(commit_op(git_remote, f"many/{i}", op_id=f"many-{i}")[0]) for i in range(3)]
    async with make_worker():
        await gb.enqueue(good[0])  # starts the batcher
        await gb.handle.signal("enqueue", [good[1], BAD_OPS[0][0], good[2], good[1]])
        await gb.handle.signal("enqueue", [])
        await gb.handle.signal("enqueue", [good[0]] * 501)
        result = await gb.flush_now()
        status = await gb.status()
        save_history("git_batcher_enqueue_list", (await gb.handle.fetch_history()).to_json())
    # the repeat landed once
    assert sorted(o.branch for o in result.outcomes) == ["many/0", "many/1", "many/2"]
    assert all(o.status == "landed" for o in result.outcomes)
    reasons = [r.reason for r in status.rejected]
    assert len(reasons) == 3 and BAD_OPS[0][1] in reasons[0], reasons
    assert "holds 0" in reasons[1] and "holds 501" in reasons[2]


async def test_bad_op_by_update_is_refused_with_its_reason(client: Client, make_worker,
                                                           task_queue, git_remote):
    gb = batcher(client, git_remote, task_queue)
    async with make_worker():
        for raw, reason in BAD_OPS:
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await gb.submit(raw)
            assert reason in str(caught.value.cause)
        status = await gb.status()
        history = await gb.handle.fetch_history()
    assert status.queue == [] and status.stats.total_ops == 0
    # Rejected in the validator: nothing about them entered history.
    assert not any(e.HasField("workflow_execution_update_accepted_event_attributes")
                   for e in history.events)


async def test_op_failing_on_the_worker_fails_alone(client: Client, make_worker, task_queue,
                                                    git_remote, tmp_path):
    """Checks that need the filesystem (worktree of another repo,
    missing worktree) fail that op only."""
    gb = batcher(client, git_remote, task_queue, max_batch_size=10)
    async with make_worker():
        await gb.enqueue(commit_op(git_remote, "fine/1")[0])
        await gb.enqueue(
            GitOp(op_type="commit", branch="ghost", message="m", worktree=str(tmp_path / "nope")))
        await gb.enqueue(GitOp(op_type="push", branch="never-created"))
        result = await gb.flush_now()
    by_branch = {o.branch: o for o in result.outcomes}
    assert by_branch["fine/1"].status == "landed"
    assert by_branch["ghost"].status == "failed" and "does not exist" in by_branch["ghost"].reason
    assert by_branch["never-created"].status == "failed"
    assert git_remote.pushes() == 1


async def test_merge_conflict_fails_one_op_and_four_land(client: Client, make_worker,
                                                         task_queue, git_remote):
    fx = git_remote
    for i in range(5):
        wt = fx.worktree(f"feature/{i}")
        if i == 3:
            fx.change(wt, "shared.txt", "line 1\nCHANGED BY FEATURE 3\nline 3\n")
        else:
            fx.change(wt, f"f{i}.txt", f"feature {i}\n")
        git(wt, "add", "-A")
        git(wt, "commit", "-q", "-m", f"feature {i}")
    # main moves on under feature 3's feet
    git(fx.clone, "checkout", "-q", "--detach")
    main_wt = fx.clone.parent / "wt" / "main-edit"
    git(fx.clone, "worktree", "add", "-q", str(main_wt), "main")
    fx.change(main_wt, "shared.txt", "line 1\nCHANGED ON MAIN\nline 3\n")
    git(main_wt, "commit", "-qam", "main edit")
    git(fx.clone, "worktree", "remove", str(main_wt))

    gb = batcher(client, fx, task_queue, max_batch_size=10)
    async with make_worker():
        for i in range(5):
            await gb.enqueue(GitOp(op_type="merge", branch=f"feature/{i}", id=f"merge-{i}"))
        result = await gb.flush_now()
    by_id = {o.op_id: o for o in result.outcomes}
    assert by_id["merge-3"].status == "failed"
    assert "shared.txt" in by_id["merge-3"].reason and "conflicts" in by_id["merge-3"].reason
    assert [by_id[f"merge-{i}"].status for i in (0, 1, 2, 4)] == ["landed"] * 4
    assert fx.pushes() == 1
    remote_main = fx.remote_ref("main")
    for i in (0, 1, 2, 4):
        git(fx.remote, "merge-base", "--is-ancestor",
            git(fx.clone, "rev-parse", f"feature/{i}"), remote_main)
    assert git(fx.remote, "show", "main:shared.txt") == "line 1\nCHANGED ON MAIN\nline 3"


async def test_a_merge_builds_on_the_remote_tip_the_clone_saw_move_ahead(
        client: Client, make_worker, task_queue, git_remote):
    """Main was pushed from this clone without its local main moving (the merge queue lands that
    way): a merge builds on the remote's tip, so its push lands instead of being refused."""
    fx = git_remote
    elsewhere = fx.branch_with("elsewhere", {"elsewhere.txt": "landed elsewhere\n"})
    git(fx.clone, "push", "-q", "origin", f"{elsewhere}:refs/heads/main")
    assert git(fx.clone, "rev-parse", "origin/main") == elsewhere
    assert git(fx.clone, "rev-parse", "main") != elsewhere
    feature = fx.branch_with("feature/ahead", {"ahead.txt": "ahead\n"})
    gb = batcher(client, fx, task_queue)
    async with make_worker():
        await gb.enqueue(GitOp(op_type="merge", branch="feature/ahead", id="merge-ahead"))
        result = await gb.flush_now()
    (outcome,) = result.outcomes
    assert outcome.status == "landed", outcome.reason
    remote_main = fx.remote_ref("main")
    for commit in (elsewhere, feature):
        git(fx.remote, "merge-base", "--is-ancestor", commit, remote_main)
    assert git(fx.clone, "rev-parse", "main") == remote_main


async def test_update_hook_declines_one_ref_others_land(client: Client, make_worker,
                                                        task_queue, git_remote):
    fx = git_remote
    fx.install_hook("update", 'case "$1" in refs/heads/blocked/*) echo "policy: no blocked/*" >&2; '
                              'exit 1;; esac\nexit 0\n')
    gb = batcher(client, fx, task_queue, max_batch_size=10)
    async with make_worker():
        for branch in ("open/1", "blocked/2", "open/3"):
            await gb.enqueue(commit_op(fx, branch)[0])
        result = await gb.flush_now()
        status = await gb.status()
    by_branch = {o.branch: o for o in result.outcomes}
    assert by_branch["open/1"].status == by_branch["open/3"].status == "landed"
    assert by_branch["blocked/2"].status == "failed"
    assert "declined" in by_branch["blocked/2"].reason
    assert fx.remote_ref("open/1") and fx.remote_ref("open/3") and not fx.remote_ref("blocked/2")
    assert fx.pushes() == 1
    assert status.stats.failed_ops == 1 and status.stats.landed_ops == 2


async def test_atomic_batch_lands_all_or_nothing(client: Client, make_worker,
                                                 task_queue, git_remote):
    fx = git_remote
    fx.install_hook("update", 'case "$1" in refs/heads/blocked/*) exit 1;; esac\nexit 0\n')
    gb = batcher(client, fx, task_queue, max_batch_size=10, atomic=True)
    async with make_worker():
        for branch in ("open/1", "blocked/2"):
            await gb.enqueue(commit_op(fx, branch)[0])
        result = await gb.flush_now()
    assert [o.status for o in result.outcomes] == ["failed", "failed"]
    assert not fx.remote_ref("open/1")


async def test_bad_repo_fails_batch_keeps_ops_and_retry_update(
        client: Client, make_worker, task_queue, git_remote, tmp_path):
    """A clone path that is not a git repository: the batch fails with the reason,
    its ops are kept."""
    not_a_repo = tmp_path / "not-a-repo"
    not_a_repo.mkdir()
    gb = GitBatcherClient(client, GitBatchConfig(repo=str(not_a_repo), max_batch_age_seconds=3600),
                          task_queue)
    async with make_worker():
        await gb.enqueue(GitOp(op_type="push", branch="main", id="p1"))
        result = await gb.flush_now()
        assert result.status == "failed"
        assert "not a git clone" in result.error
        status = await gb.status()
        assert [b.id for b in status.failed_batches] == [result.batch_id]
        assert status.failed_batches[0].ops[0].id == "p1"

        # The clone appears; retry lands the kept batch.
        git(tmp_path, "clone", "-q", str(git_remote.remote), str(not_a_repo))
        retried = await gb.retry(result.batch_id)
        assert retried.status == "completed"
        assert [o.status for o in retried.outcomes] == ["up_to_date"]
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await gb.retry("batch-999")
        assert "not a failed batch" in str(caught.value.cause)


async def test_commit_ops_with_wrong_worktrees_fail_alone(client: Client, make_worker, task_queue,
                                                          git_remote, tmp_path):
    """A batch's commit ops are checked before the parallel commit: a missing path, a plain folder,
    a worktree on another branch and one of another clone each fail with why; the rest land."""
    fx = git_remote
    good = [commit_op(fx, f"good/{i}", f"good-{i}")[0] for i in range(2)]
    wrong_branch, _ = commit_op(fx, "wrong/actual", "wrong-branch")
    wrong_branch.branch = "wrong/expected"
    git(fx.clone, "branch", "wrong/expected", "main")
    plain = tmp_path / "plain-folder"
    plain.mkdir()
    other = make_git_remote(tmp_path / "other")
    other_wt = other.worktree("foreign/1")
    other.change(other_wt, "x.txt", "x\n")
    bad = [
        wrong_branch,
        GitOp(op_type="commit", branch="good/0", worktree=str(tmp_path / "missing"), id="missing",
              message="m"),
        GitOp(op_type="commit", branch="good/1", worktree=str(plain), id="plain", message="m"),
        GitOp(op_type="commit", branch="foreign/1", worktree=str(other_wt), id="foreign",
              message="m"),
    ]
    gb = batcher(client, fx, task_queue, max_batch_size=10)
    async with make_worker():
        for op in good + bad:
            await gb.enqueue(op)
        result = await gb.flush_now()
        assert (await gb.status()).rejected == []
    reasons = {o.op_id: o.reason for o in result.outcomes if o.status == "failed"}
    assert set(reasons) == {"wrong-branch", "missing", "plain", "foreign"}
    assert "is on wrong/actual, not on branch wrong/expected" in reasons["wrong-branch"]
    assert "does not exist on this worker" in reasons["missing"]
    assert "is not a git checkout" in reasons["plain"]
    assert "belongs to another repository" in reasons["foreign"]
    for i in range(2):
        assert fx.remote_ref(f"good/{i}") == git(fx.clone, "rev-parse", f"good/{i}")
    assert fx.pushes() == 1


async def test_push_expecting_a_commit_fails_alone_when_the_branch_moved(
        client: Client, make_worker, task_queue, git_remote):
    """A push op whose branch is no longer at `expect_commit` fails (only that op), and
    a landed op's `branch_commit` is the remote ref's new value."""
    fx = git_remote
    main = git(fx.clone, "rev-parse", "main")
    for name in ("steady", "moved"):
        git(fx.clone, "branch", name, "main")
    # The op is sent expecting main's commit; then the branch moves on before the batch applies.
    wt = fx.clone.parent / "wt" / "moved"
    git(fx.clone, "worktree", "add", "-q", str(wt), "moved")
    fx.change(wt, "later.txt", "committed after the op was sent\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "moved on")
    moved_tip = git(fx.clone, "rev-parse", "moved")
    gb = batcher(client, fx, task_queue, max_batch_size=10)
    async with make_worker():
        await gb.enqueue(GitOp(op_type="push", branch="steady", id="steady", expect_commit=main))
        await gb.enqueue(GitOp(op_type="push", branch="moved", id="moved", expect_commit=main))
        result = await gb.flush_now()
    by_id = {o.op_id: o for o in result.outcomes}
    assert by_id["steady"].status == "landed"
    assert by_id["steady"].branch_commit == fx.remote_ref("steady") == main
    assert by_id["moved"].status == "failed" and by_id["moved"].branch_commit == ""
    reason = by_id["moved"].reason
    assert "moved" in reason and moved_tip in reason and main in reason, reason
    assert not fx.remote_ref("moved")


async def test_branch_commit_of_commit_push_and_merge_ops(client: Client, make_worker,
                                                          task_queue, git_remote):
    """C1 for each op type: commit and push report the ref the remote now holds; a merge reports
    the merged branch's tip, and the target's new value stays in `commit`."""
    fx = git_remote
    commit, _ = commit_op(fx, "c1/commit", "c")
    gb = batcher(client, fx, task_queue, max_batch_size=10)
    async with make_worker():
        await gb.enqueue(commit)
        first = await gb.flush_now()
        tip = git(fx.clone, "rev-parse", "c1/commit")
        await gb.enqueue(GitOp(op_type="push", branch="c1/commit", id="p"))  # already there
        await gb.enqueue(GitOp(op_type="merge", branch="c1/commit", id="m", expect_commit=tip))
        second = await gb.flush_now()
    [c] = first.outcomes
    assert c.status == "landed" and c.branch_commit == tip == fx.remote_ref("c1/commit")
    by_id = {o.op_id: o for o in second.outcomes}
    assert by_id["p"].status == "up_to_date" and by_id["p"].branch_commit == tip
    assert by_id["m"].status == "landed" and by_id["m"].branch_commit == tip
    assert by_id["m"].commit == fx.remote_ref("main") != tip


@pytest.mark.parametrize("bad", ["abc", "A" * 40, "g" * 40])
async def test_expect_commit_must_be_forty_hex(client: Client, make_worker, task_queue,
                                               git_remote, bad):
    gb = batcher(client, git_remote, task_queue)
    async with make_worker():
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await gb.submit({"op_type": "push", "branch": "main", "expect_commit": bad})
    assert "expect_commit" in str(caught.value.cause)


async def test_retry_of_a_batch_that_fails_again_reports_failed(
        client: Client, make_worker, task_queue, tmp_path):
    """A batch cut by a size flush fails (nobody waits on it); `retry` then fails again and must say
    so, with the error, since a retry reported as done would hide ops that never landed. Failed
    batches count in `failed_ops`."""
    not_a_repo = tmp_path / "not-a-repo"
    not_a_repo.mkdir()
    gb = GitBatcherClient(client, GitBatchConfig(repo=str(not_a_repo), max_batch_size=1,
                                                 max_batch_age_seconds=3600), task_queue)
    async with make_worker():
        await gb.enqueue(GitOp(op_type="push", branch="main", id="p1"))

        async def failed_once():
            status = await gb.status()
            assert status.failed_batches, status
            return status

        status = await eventually(failed_once)
        batch_id = status.failed_batches[0].id
        assert status.stats.failed_ops == 1
        retried = await gb.retry(batch_id)
        status = await gb.status()
    assert retried.status == "failed"
    assert "not a git clone" in retried.error and retried.error.startswith(f"{batch_id}: ")
    assert "\n" not in retried.error
    assert [o.status for o in retried.outcomes] == ["failed"]
    assert [b.id for b in status.failed_batches] == [batch_id]
    assert status.stats.failed_ops == 2 and status.stats.landed_ops == 0


async def test_held_ops_are_bounded_and_room_returns_after_landing(
        client: Client, make_worker, task_queue, git_remote):
    """Accepted ops are never dropped, so the batcher refuses new ones past its held-ops budget
    (what it would carry through continue-as-new), with why;
    once batches land there is room again."""
    fx = git_remote
    big = "m" * (60 * 1024)
    gb = batcher(client, fx, task_queue, max_batch_size=100)
    accepted = 0
    async with make_worker(workflows=[LandedListener]):
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            for i in range(20):
                await gb.submit(GitOp(op_type="merge", branch="main", target=f"room/{i}",
                                      id=f"big-{i}", message=big))
                accepted += 1
        assert "unfinished ops" in str(caught.value.cause) and "KiB" in str(caught.value.cause)
        assert 4 <= accepted < 20
        listener = await client.start_workflow(LandedListener.run, id=f"listener-{task_queue}",
                                               task_queue=task_queue)
        await gb.enqueue(GitOp(op_type="push", branch="main", id="refused-by-signal", message=big,
                               reply_to=listener.id))
        status = await gb.status()
        assert len(status.queue) == accepted
        assert "unfinished ops" in status.rejected[-1].reason
        assert len(status.rejected[-1].op["message"]) < 200  # a preview, not the op

        async def told() -> list[OpOutcome]:
            outcomes = await listener.query(LandedListener.outcomes)
            assert outcomes, "the sender of the refused op was not told"
            return outcomes

        [outcome] = await eventually(told)
        assert outcome.op_id == "refused-by-signal" and outcome.status == "failed"
        assert "refused by the git batcher" in outcome.reason and "unfinished ops" in outcome.reason
        await gb.flush_now()
        assert await gb.submit(
            GitOp(op_type="push", branch="main", id="after", message=big)) == "after"


async def test_each_task_queue_has_its_own_batcher(client: Client, git_remote, settings, tmp_path):
    """Two clients on two queues, two workers: two batchers, each landing through the
    worker of its own queue."""
    from temporalio.worker import Worker

    from taskfleet.core.ids import git_batch_workflow_id
    from taskfleet.plugin import TaskfleetPlugin

    fx = git_remote
    queues = [f"c2-a-{tmp_path.name[-8:]}", f"c2-b-{tmp_path.name[-8:]}"]
    clients = [batcher(client, fx, q) for q in queues]
    assert clients[0].workflow_id != clients[1].workflow_id
    assert git_batch_workflow_id(str(fx.clone)) == git_batch_workflow_id(
        str(fx.clone), "origin", "taskfleet")
    assert clients[0].workflow_id.startswith("taskfleet-git-clone-origin-")
    workers = [Worker(client, task_queue=q, plugins=[TaskfleetPlugin(settings)]) for q in queues]
    async with workers[0], workers[1]:
        for i, gb in enumerate(clients):
            await gb.enqueue(commit_op(fx, f"q{i}/work")[0])
        results = [await gb.flush_now() for gb in clients]
        histories = [await gb.handle.fetch_history() for gb in clients]
    for i, (result, history) in enumerate(zip(results, histories)):
        assert [o.status for o in result.outcomes] == ["landed"]
        assert fx.remote_ref(f"q{i}/work") == result.outcomes[0].branch_commit
        scheduled = [e.activity_task_scheduled_event_attributes.task_queue.name
                     for e in history.events
                     if e.HasField("activity_task_scheduled_event_attributes")]
        assert scheduled == [queues[i]]
