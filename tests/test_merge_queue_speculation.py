"""The merge queue's speculation on a real server, real git and a bare remote: batches verified
at once, each stacked on the one ahead; a speculation undone by a culprit ahead; flakes told from
culprits; risky entries verified alone; every stage and base shown in `status`, CLI and Web UI."""

from __future__ import annotations

import subprocess
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata

from taskfleet.core.models.merge_queue import MergeQueueStatus
from tests.conftest import GitRemoteFixture, eventually, git, save_history
from tests.test_merge_queue import (
    LIB,
    VERIFY,
    decided,
    entry,
    library_remote,
    outcomes,
    queue,
    queue_lessons,
)
from tests.user_cli import taskfleet


def forward_only(fx: GitRemoteFixture) -> Path:
    """A pre-receive hook that refuses any update of main but a fast-forward, and logs each tip."""
    log = fx.remote.parent / "tips.log"
    fx.install_hook(
        "pre-receive",
        (
            "while read old new ref; do\n"
            '  if [ "$ref" = refs/heads/main ] && '
            '! git merge-base --is-ancestor "$old" "$new"; then\n'
            '    echo "not a fast-forward" >&2; exit 1\n'
            "  fi\n"
            f'  echo "$new" >> "{log}"\n'
            "done\n"
            f'echo push >> "{fx.push_log}"\n'
        ),
    )
    return log


def every_tip_passes(fx: GitRemoteFixture, log: Path, tmp: Path) -> bool:
    """Each commit main was ever moved to passes the verify command, checked out fresh."""
    for tip in log.read_text().split():
        where = tmp / f"tip-{tip[:12]}"
        git(fx.remote, "worktree", "add", "-q", "--detach", str(where), tip)
        if subprocess.run(VERIFY, shell=True, cwd=where, capture_output=True).returncode != 0:
            return False
    return True


def in_main(fx: GitRemoteFixture, commit: str) -> bool:
    return (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, "main"], cwd=fx.remote
        ).returncode
        == 0
    )


async def test_a_speculation_undone_by_a_culprit_ahead_is_rebuilt_without_it(
    client, make_worker, task_queue, settings, tmp_path
):
    fx = library_remote(tmp_path)
    tips = forward_only(fx)
    culprit = entry(fx, "culprit", {"lib.py": LIB.replace("hi", "bye")}, task_type="lib")
    good = [entry(fx, f"good/{i}", {f"pages/{i}.txt": f"{i}\n"}) for i in range(2)]
    # The culprit's own batch (batch-1) is verified last: the batches stacked on it finish first.
    slow_head = 'if [ "$TASKFLEET_QUEUE_BATCH" = batch-1 ]; then sleep 1; fi; '
    q = queue(client, fx, task_queue, max_batch=1, parallel=3, verify=slow_head + VERIFY)
    async with make_worker():
        for e in (culprit, *good):
            await q.enqueue(e)
        await q.flush()
        status = await decided(q, 3)
        save_history("merge_queue_speculating", (await q.handle.fetch_history()).to_json())
    done = outcomes(status)
    assert done["culprit"].status == "rejected" and "bye" in done["culprit"].output_tail, done[
        "culprit"
    ]
    assert not in_main(fx, culprit.expect_commit)
    for e in good:
        o = done[e.id]
        assert o.status == "landed" and in_main(fx, e.expect_commit), o
        # verified first stacked on the culprit (red), then again rebuilt without it (green)
        assert len(o.verified_in) >= 2 and o.batch_id != o.verified_in[0], o
    assert every_tip_passes(fx, tips, tmp_path) and fx.pushes() == status.stats.pushes
    assert not status.batches and status.stats.rejected == 1 and status.stats.landed == 2
    assert [lesson["failure_type"] for lesson in queue_lessons(settings)] == ["verify_failed"]


async def test_a_flaky_single_entry_is_verified_again_on_the_same_merge_and_lands(
    client, make_worker, task_queue, settings, tmp_path
):
    fx = library_remote(tmp_path)
    once = tmp_path / "flaked"
    # The suite's first run fails for no reason of the change's (a flaky test); later ones pass.
    flaky = f'if [ ! -e "{once}" ]; then touch "{once}"; echo "FAIL: test_network"; exit 1; fi; '
    change = entry(fx, "change", {"pages/a.txt": "a\n"}, task_type="docs")
    q = queue(client, fx, task_queue, verify=flaky + VERIFY)
    async with make_worker():
        await q.enqueue(change)
        await q.flush()
        status = await decided(q, 1)
    o = outcomes(status)["change"]
    assert o.status == "landed" and in_main(fx, change.expect_commit), o
    # red, then green on the same merge: it lands as verified, with no run again
    assert o.verified_in == [o.batch_id, f"{o.batch_id}-again-1"], o
    s = status.stats
    assert (s.flaky_runs, s.confirm_runs, s.rejected, s.landed) == (1, 1, 0, 1), s
    [lesson] = queue_lessons(settings)
    assert lesson["failure_type"] == "flaky" and "FAIL: test_network" in lesson["failure_msg"], (
        lesson
    )
    assert lesson["task_type"] == "docs" and lesson["metadata"]["entries"] == ["change"]


async def test_a_red_batch_whose_parts_all_pass_is_recorded_flaky_and_lands(
    client, make_worker, task_queue, settings, tmp_path
):
    fx = library_remote(tmp_path)
    once = tmp_path / "flaked"
    flaky = (
        f'if [ ! -e "{once}" ]; then touch "{once}"; echo "FAIL: test_clock (flaky)"; exit 1; fi; '
    )
    entries = [entry(fx, f"e/{i}", {f"pages/{i}.txt": f"{i}\n"}) for i in range(4)]
    q = queue(client, fx, task_queue, max_batch=4, parallel=2, verify=flaky + VERIFY)
    async with make_worker():
        for e in entries:  # a full window: one batch of four, red once for no reason
            await q.enqueue(e)
        status = await decided(q, 4)
    assert all(o.status == "landed" for o in status.recent), status.recent
    s = status.stats
    assert s.flaky_runs == 1 and s.bisection_steps == 1 and s.rejected == 0, s
    lessons = queue_lessons(settings)
    assert [lesson["failure_type"] for lesson in lessons] == ["flaky"]
    assert "FAIL: test_clock" in lessons[0]["failure_msg"] and lessons[0]["metadata"]["batch"]


async def test_a_risky_entry_is_verified_alone_and_a_risky_culprit_never_splits_a_batch(
    client, make_worker, task_queue, tmp_path
):
    fx = library_remote(tmp_path)
    culprit = entry(
        fx, "culprit", {"lib.py": LIB.replace("hi", "bye")}, risk=1
    )  # its judge asked for a revise
    good = [entry(fx, f"good/{i}", {f"pages/{i}.txt": f"{i}\n"}) for i in range(3)]
    risky_good = entry(fx, "risky-good", {"pages/r.txt": "r\n"}, risk=2)
    q = queue(client, fx, task_queue, max_batch=8, parallel=2)
    async with make_worker():
        for e in (good[0], culprit, good[1], risky_good, good[2]):
            await q.enqueue(e)
        await q.flush()
        status = await decided(q, 5)
    done = outcomes(status)
    assert done["culprit"].status == "rejected" and not done["culprit"].split_in, done["culprit"]
    assert all(done[e.id].status == "landed" for e in (*good, risky_good)), status.recent
    # the risky ones were verified on their own first: no other entry shared that run
    for risky in ("culprit", "risky-good"):
        first = done[risky].verified_in[0]
        assert not any(first in o.verified_in for o in status.recent if o.entry_id != risky), (
            status.recent
        )
    assert status.stats.bisection_steps == 0, status.stats


async def test_status_the_cli_and_the_web_ui_show_each_batch_stage_and_base(
    client, make_worker, task_queue, server_address, tmp_path
):
    fx = library_remote(tmp_path)
    release = tmp_path / "release"
    hold = f'while [ ! -e "{release}" ]; do sleep 0.05; done; '
    entries = [entry(fx, f"s/{i}", {f"pages/{i}.txt": f"{i}\n"}) for i in range(3)]
    q = queue(client, fx, task_queue, max_batch=1, parallel=3, verify=hold + VERIFY)
    async with make_worker():
        for e in entries:
            await q.enqueue(e)
        await q.flush()

        async def speculating() -> MergeQueueStatus:
            status = await q.status()
            assert [b.stage for b in status.batches] == ["verifying"] * 3, status.batches
            return status

        status = await eventually(speculating)
        assert [(b.id, b.stacked_on, b.lane) for b in status.batches] == [
            ("batch-1", "", "train"),
            ("batch-2", "batch-1", "train"),
            ("batch-3", "batch-2", "train"),
        ]
        assert status.stats.in_flight == 3 and status.stats.parallel == 3
        meta = await q.handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        details = meta.current_details
        assert "batch-2 [train] verifying, 1 entries on batch-1" in details, details
        assert "3 of 3 verify runs" in details and "flaky runs 0" in details, details
        shown = await taskfleet(
            server_address,
            "queue",
            "status",
            "--repo",
            str(fx.clone),
            "--target",
            "main",
            cwd=tmp_path,
            task_queue=task_queue,
        )
        assert shown.returncode == 0, shown.stderr
        assert "train    batch-3 verifying, 1 entries on batch-2: s/2" in shown.stdout, shown.stdout
        assert "verify runs in flight 3 of 3" in shown.stdout and "flaky runs 0" in shown.stdout, (
            shown.stdout
        )
        release.touch()
        status = await decided(q, 3)
    assert status.stats.landed == 3 and status.stats.pushes <= 3 and not status.batches
