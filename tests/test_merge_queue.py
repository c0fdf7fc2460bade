"""MergeQueueWorkflow on a real server, real git and a bare remote: batches, bisection, conflicts, a
moving target."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.merge_queue import MergeQueueClient
from taskfleet.core.models.merge_queue import MergeQueueConfig, MergeQueueStatus, QueueEntry
from tests.conftest import GitRemoteFixture, eventually, git, make_git_remote, save_history

# A small library with a unit test: what every entry's merged result must keep passing.
LIB = 'def greet(name):\n    return f"hi {name}"\n'
TEST = ("import unittest\n\nfrom lib import greet\n\n\nclass T(unittest.TestCase):\n"
        "    def test_greet(self):\n"
        "        self.assertEqual(greet('a'), 'hi a')\n")
VERIFY = "python3 -m unittest discover -q -s tests -t ."


def library_remote(root: Path) -> GitRemoteFixture:
    seed = root / "seed-files"
    (seed / "tests").mkdir(parents=True)
    (seed / "lib.py").write_text(LIB)
    (seed / "tests" / "__init__.py").write_text("")
    (seed / "tests" / "test_greet.py").write_text(TEST)
    (seed / "shared.txt").write_text("line 1\nline 2\nline 3\n")
    return make_git_remote(root / "git", seed_from=seed)


def fast_forward_only(fx: GitRemoteFixture) -> Path:
    """A pre-receive hook that refuses any non-fast-forward update of main and logs every update."""
    log = fx.remote.parent / "updates.log"
    fx.install_hook("pre-receive", (
        'while read old new ref; do\n'
        f'  echo "$old $new $ref" >> "{log}"\n'
        '  if [ "$ref" = refs/heads/main ] && ! git merge-base --is-ancestor "$old" "$new"; then\n'
        '    echo "not a fast-forward" >&2; exit 1\n'
        '  fi\n'
        'done\n'
        f'echo push >> "{fx.push_log}"\n'
    ))
    return log


def queue(client: Client, fx: GitRemoteFixture, task_queue: str, **config) -> MergeQueueClient:
    config.setdefault("verify", VERIFY)
    config.setdefault("max_wait_seconds", 3600)
    return MergeQueueClient(client, MergeQueueConfig(repo=str(fx.clone), target="main", **config),
                            task_queue)


def entry(fx: GitRemoteFixture, branch: str, files: dict[str, str | None], **fields) -> QueueEntry:
    return QueueEntry(branch=branch, expect_commit=fx.branch_with(branch, files),
                      id=branch, **fields)


async def decided(q: MergeQueueClient, count: int, timeout: float = 60) -> MergeQueueStatus:
    async def check() -> MergeQueueStatus:
        status = await q.status()
        s = status.stats
        assert s.landed + s.rejected + s.conflicts >= count, (s, status.last_error)
        return status

    return await eventually(check, timeout=timeout)


def passes_verify(fx: GitRemoteFixture, tmp: Path) -> bool:
    """The remote's main, cloned fresh, passes the verify command."""
    checkout = tmp / "fresh"
    git(tmp, "clone", "-q", str(fx.remote), str(checkout))
    return subprocess.run(VERIFY, shell=True, cwd=checkout, capture_output=True).returncode == 0


def queue_lessons(settings) -> list[dict]:
    """The lessons the queue recorded (activity type `queue`), from the worker's lessons file."""
    lessons = [json.loads(line) for line in settings.lessons_path.read_text().splitlines()]
    return [lesson for lesson in lessons if lesson["activity_type"] == "queue"]


def outcomes(status: MergeQueueStatus) -> dict[str, object]:
    return {o.entry_id: o for o in status.recent}


@pytest.mark.smoke
async def test_a_batch_is_verified_once_and_lands_with_one_push(
        client, make_worker, task_queue, tmp_path):
    fx = library_remote(tmp_path)
    updates = fast_forward_only(fx)
    entries = [entry(fx, f"add/{i}", {f"notes/{i}.txt": f"{i}\n"}) for i in range(3)]
    q = queue(client, fx, task_queue, max_batch=3)
    async with make_worker():
        for e in entries:
            await q.enqueue(e)
        status = await decided(q, 3)
        save_history("merge_queue_one_batch", (await q.handle.fetch_history()).to_json())
    s = status.stats
    assert (s.landed, s.verify_runs, s.pushes, s.batches, s.bisection_steps) == (3, 1, 1, 1, 0), s
    assert s.verify_runs_per_landed == round(1 / 3, 3) and s.window == 3
    assert fx.pushes() == 1 and len(updates.read_text().splitlines()) == 1
    tip = fx.remote_ref("main")
    for e in entries:
        o = outcomes(status)[e.id]
        assert o.status == "landed" and o.commit == tip and o.branch_commit == e.expect_commit, o
        assert o.pushed_in == o.batch_id and o.verified_in == [o.batch_id]
        git(fx.remote, "merge-base", "--is-ancestor", e.expect_commit, tip)
    # merged without a checkout: the clone's own main never moved, the queue's private ref did
    assert git(fx.clone, "rev-parse", "main") != tip
    assert tip in git(fx.clone, "for-each-ref", "--format=%(objectname)", "refs/taskfleet/queue/")
    assert passes_verify(fx, tmp_path)


async def test_two_entries_that_pass_alone_but_fail_together_the_later_is_confirmed_and_rejected(
    client, make_worker, task_queue, settings, tmp_path
):
    fx = library_remote(tmp_path)
    # A renames greet -> hello (and its test); B adds a test that still calls greet.
    rename = entry(fx, "rename",
                   {"lib.py": LIB.replace("greet", "hello"),
                    "tests/test_greet.py": TEST.replace("greet", "hello")}, task_type="lib")
    caller_test = TEST.replace("test_greet", "test_caller")
    caller = entry(fx, "caller", {"tests/test_caller.py": caller_test}, task_type="lib")
    q = queue(client, fx, task_queue, max_batch=4)
    async with make_worker():
        await q.enqueue(rename)
        await q.enqueue(caller)
        await q.flush()
        status = await decided(q, 2)
        save_history("merge_queue_bisection", (await q.handle.fetch_history()).to_json())
    done = outcomes(status)
    assert done["rename"].status == "landed", done["rename"]
    rejected = done["caller"]
    assert rejected.status == "rejected" and "greet" in rejected.output_tail, rejected
    assert "verify" in rejected.reason and "red 2 times" in rejected.reason
    assert rejected.commit == fx.remote_ref("main")
    # Two entries, four free slots: each its own batch, the second stacked on the first and
    # verified at the same time; red, it is verified again on the same merge before it is rejected.
    [batch] = {o.batch_id for o in status.recent if o.entry_id == "caller"}
    assert rejected.verified_in == [batch, f"{batch}-again-1"] and not rejected.split_in, rejected
    s = status.stats
    figures = (s.verify_runs, s.confirm_runs, s.pushes, s.landed, s.rejected, s.flaky_runs)
    assert figures == (3, 1, 1, 1, 1, 0), s
    assert not status.batches and s.window == 4  # one culprit in two decided entries: it holds
    assert passes_verify(fx, tmp_path)
    lessons = queue_lessons(settings)
    assert [(lesson["failure_type"], lesson["task_type"])
            for lesson in lessons] == [("verify_failed", "lib")]
    assert "greet" in lessons[0]["failure_msg"]


async def test_a_red_batch_is_split_in_parallel_parts_and_only_its_culprit_is_rejected(
    client, make_worker, task_queue, tmp_path
):
    fx = library_remote(tmp_path)
    good = [entry(fx, f"good/{i}", {f"notes/{i}.txt": f"{i}\n"}) for i in range(3)]
    culprit = entry(fx, "culprit", {"lib.py": LIB.replace("hi", "bye")})
    q = queue(client, fx, task_queue, max_batch=4, parallel=2)
    async with make_worker():
        for e in (good[0], good[1], culprit, good[2]):  # a full window: one batch of four
            await q.enqueue(e)
        status = await decided(q, 4)
    done = outcomes(status)
    assert all(done[e.id].status == "landed" for e in good), status.recent
    assert done["culprit"].status == "rejected" and "bye" in done["culprit"].output_tail
    first = done["culprit"].split_in[0]
    assert all(first in done[e.id].split_in for e in good), "the red batch was taken apart"
    s = status.stats
    assert s.bisection_steps >= 2 and s.rejected == 1 and s.flaky_runs == 0, s
    assert passes_verify(fx, tmp_path)


async def test_a_textual_conflict_is_answered_with_its_files(
        client, make_worker, task_queue, settings, tmp_path):
    fx = library_remote(tmp_path)
    first = entry(fx, "edit/a", {"shared.txt": "line 1\nA\nline 3\n"})
    second = entry(fx, "edit/b", {"shared.txt": "line 1\nB\nline 3\n"})
    third = entry(fx, "edit/c", {"other.txt": "c\n"})
    q = queue(client, fx, task_queue, max_batch=3)
    async with make_worker():
        for e in (first, second, third):
            await q.enqueue(e)
        status = await decided(q, 3)
    done = outcomes(status)
    assert done["edit/a"].status == "landed" and done["edit/c"].status == "landed"
    conflict = done["edit/b"]
    assert conflict.status == "conflict" and conflict.files == ["shared.txt"], conflict
    assert "shared.txt" in conflict.reason and not conflict.verified_in
    assert status.stats.verify_runs == 1 and status.stats.conflicts == 1 and fx.pushes() == 1
    assert git(fx.remote, "show", "main:shared.txt") == "line 1\nA\nline 3"
    assert [lesson["failure_type"] for lesson in queue_lessons(settings)] == ["conflict"]


async def test_the_target_moved_by_a_person_mid_batch_is_rebuilt_never_forced(
        client, make_worker, task_queue, tmp_path):
    fx = library_remote(tmp_path)
    updates = fast_forward_only(fx)
    started, release = tmp_path / "verify-started", tmp_path / "verify-release"
    # The first verify waits until the test has pushed to main behind the queue's back.
    hold = (f'if [ ! -e "{started}" ]; then touch "{started}"; '
            f'while [ ! -e "{release}" ]; do sleep 0.05; done; fi; ')
    entries = [entry(fx, f"mid/{i}", {f"mid/{i}.txt": f"{i}\n"}) for i in range(2)]
    q = queue(client, fx, task_queue, max_batch=2, verify=hold + VERIFY)
    async with make_worker():
        for e in entries:
            await q.enqueue(e)

        async def verifying() -> None:
            assert started.exists()

        await eventually(verifying)
        person = tmp_path / "person"
        git(tmp_path, "clone", "-q", str(fx.remote), str(person))
        (person / "README.md").write_text("a person's change\n")
        git(person, "add", "-A")
        git(person, "commit", "-qm", "a person pushes to main")
        git(person, "push", "-q", "origin", "main")
        theirs = git(person, "rev-parse", "HEAD")
        release.touch()
        status = await decided(q, 2)
    s = status.stats
    assert (s.landed, s.rebuilds, s.verify_runs, s.pushes) == (2, 1, 2, 1), s
    tip = fx.remote_ref("main")
    git(fx.remote, "merge-base", "--is-ancestor", theirs, tip)  # their commit is kept under ours
    assert all(o.commit == tip for o in status.recent)
    # every update of main was a fast-forward (the hook refuses others), and nothing was refused
    assert len(updates.read_text().splitlines()) == 2 and fx.pushes() == 2


async def test_an_entry_whose_branch_moved_is_rejected_with_the_reason(
        client, make_worker, task_queue, tmp_path):
    fx = library_remote(tmp_path)
    moved = entry(fx, "moved", {"m.txt": "1\n"})
    fx.branch_with("moved", {"m.txt": "2\n"})  # the branch moves after the entry was sent
    missing = QueueEntry(branch="gone", expect_commit="0" * 40, id="gone")
    good = entry(fx, "good", {"g.txt": "g\n"})
    q = queue(client, fx, task_queue, max_batch=3)
    async with make_worker():
        for e in (moved, missing, good):
            await q.enqueue(e)
        status = await decided(q, 3)
    done = outcomes(status)
    assert done["moved"].status == "rejected" and "moved after the entry was sent" in done[
        "moved"].reason
    assert done["gone"].status == "rejected" and "does not exist" in done["gone"].reason
    assert done["good"].status == "landed" and status.stats.verify_runs == 1
