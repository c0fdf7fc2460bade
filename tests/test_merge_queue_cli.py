"""The merge queue from the command line: `taskfleet queue ...` as a user runs it, and the
`temporal` CLI sending whatever a person can type. Nothing wedges the queue: after each bad input a
good entry lands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.service import RPCError

from taskfleet.clients.merge_queue import merge_queue_workflow_id
from tests.conftest import GitRemoteFixture, eventually, git
from tests.test_temporal_cli import (
    SHAPES,
    inputs_for,
    nested,
    run_temporal,
    starts_fail_with_why,
    temporal,
)
from tests.user_cli import assert_one_line_refusal, taskfleet

VERIFY = "test -f seed.marker"


def remote_with_marker(fx: GitRemoteFixture) -> None:
    """main carries the file the verify command checks; a branch that deletes it fails verify."""
    fx.branch_with("marker", {"seed.marker": "ok\n"})
    git(fx.clone, "push", "-q", "origin", "marker:main")
    git(fx.clone, "fetch", "-q", "origin")


async def test_queue_add_wait_status_and_refusals_as_a_user_runs_them(
    client, server_address, task_queue, make_worker, git_remote: GitRemoteFixture, tmp_path: Path
):
    fx = git_remote
    remote_with_marker(fx)
    fx.branch_with("feature/ok", {"ok.txt": "ok\n"}, base="origin/main")
    fx.branch_with("feature/bad", {"seed.marker": None}, base="origin/main")
    where = tmp_path / "elsewhere"
    where.mkdir()
    common = ("--repo", str(fx.clone), "--verify", VERIFY, "--max-wait-seconds", "0.5")
    async with make_worker():
        done = await taskfleet(server_address, "queue", "add", "feature/ok", *common, "--wait",
                               "--wait-timeout", "20", cwd=where, task_queue=task_queue)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "queued entry-1 (feature/ok at" in done.stdout
        assert "entry-1 (feature/ok): landed at" in done.stdout
        # the target defaulted to the remote's default branch (origin/HEAD: main)
        assert merge_queue_workflow_id(str(fx.clone), "origin", "main", task_queue) in done.stdout

        done = await taskfleet(server_address, "queue", "add", "feature/bad", *common, "--wait",
                               cwd=where, task_queue=task_queue)
        assert done.returncode == 1, done.stdout
        assert "rejected" in done.stdout and "exited with 1" in done.stdout, done.stdout

        status = await taskfleet(server_address, "queue", "status", "--repo", str(fx.clone),
                                 cwd=where, task_queue=task_queue)
        assert status.returncode == 0 and "landed 1, rejected 1" in status.stdout, status.stdout
        as_json = await taskfleet(server_address, "queue", "status", "--repo", str(fx.clone),
                                  "--json", cwd=where, task_queue=task_queue)
        # the red one ran twice, on the same merge
        assert json.loads(as_json.stdout)["stats"]["verify_runs"] == 3

        # refused before anything is sent: one line, exit code 2
        assert_one_line_refusal(await taskfleet(server_address, "queue", "add", "no/such", "--repo",
                                                str(fx.clone), cwd=where, task_queue=task_queue),
                                "no/such", "exists neither")
        assert_one_line_refusal(await taskfleet(server_address, "queue", "add", "x", "--repo", str(
            where), cwd=where, task_queue=task_queue), "not a git repository")
        (fx.clone / "sub").mkdir()
        for args, why in (
                (("--repo", str(fx.clone / "sub")), "not its top folder"),
                (("--repo", str(fx.clone), "--target", "no-such-target"), "no such branch"),
                (("--repo", str(fx.clone), "--commit", "0" * 40), "no such commit"),
                (("--repo", str(fx.clone), "--wait", "--wait-timeout", "-1"), "above 0")):
            assert_one_line_refusal(await taskfleet(
                server_address, "queue", "add", "feature/ok", *args, cwd=where,
                task_queue=task_queue), why)
        for command in ("status", "flush"):
            assert_one_line_refusal(await taskfleet(
                server_address, "queue", command, "--repo", str(tmp_path / "no-such-clone"),
                cwd=where, task_queue=task_queue), "no such folder")
        for repo, target in ((fx.clone / "sub", "main"), (fx.clone, "no-such-target")):
            never = client.get_workflow_handle(
                merge_queue_workflow_id(str(repo), "origin", target, task_queue))
            with pytest.raises(RPCError):  # not found: a refused entry starts no queue
                await never.describe()
        # refused by the queue itself (its validator): one line, exit code 1
        done = await taskfleet(server_address, "queue", "add", "main", *common, cwd=where,
                               task_queue=task_queue)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "cannot land main into itself" in done.stderr and "Traceback" not in done.stderr
    assert fx.remote_ref("main") == git(fx.remote, "rev-parse", "main")
    git(fx.remote, "merge-base", "--is-ancestor", git(fx.clone, "rev-parse", "feature/ok"), "main")


async def test_no_input_from_the_temporal_cli_wedges_the_queue(
    server_address, task_queue, make_worker, git_remote: GitRemoteFixture, tmp_path: Path
):
    fx = git_remote
    remote_with_marker(fx)
    wf = merge_queue_workflow_id(str(fx.clone), "origin", "main", task_queue)
    start = json.dumps({"repo": str(fx.clone), "target": "main", "verify": VERIFY, "max_batch": 1})
    good = 0

    async def status() -> dict:
        out = await temporal(server_address, "workflow", "query", "--workflow-id", wf, "--name",
                             "status", "-o", "json")
        return json.loads(out)["queryResult"][0]

    async def good_entry_lands() -> None:
        """A good entry sent now is accepted and lands: the queue is alive."""
        nonlocal good
        good += 1
        branch = f"cli/good-{good}"
        commit = fx.branch_with(branch, {f"good-{good}.txt": "g\n"}, base="origin/main")
        entry = {"branch": branch, "expect_commit": commit, "id": f"good-{good}"}
        await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name",
                       "enqueue", "--input", json.dumps(entry))

        async def landed() -> None:
            current = await status()
            assert current["stats"]["landed"] == good, (current["stats"], current["lastError"]
                                                        if "lastError" in current
                                                        else current.get("last_error"))

        await eventually(landed)

    async with make_worker():
        await temporal(server_address, "workflow", "signal-with-start", "--workflow-id", wf,
                       "--type", "MergeQueueWorkflow", "--task-queue", task_queue, "--input", start,
                       "--signal-name", "enqueue", "--signal-input",
                       json.dumps({"branch": "--force", "expect_commit": "a" * 40}))
        await good_entry_lands()
        assert "starts with '-'" in (await status())["rejected"][0]["reason"]

        bad_fields = [
            {"branch": "x"},  # no expect_commit
            {"branch": "x", "expect_commit": "HEAD"},
            {"branch": "x", "expect_commit": "a" * 40, "colour": "red"},
            {"branch": "x", "expect_commit": "a" * 40, "verify": "   "},
        ]
        for kind in SHAPES + [f"field-{i}" for i in range(len(bad_fields))]:
            shape = (["--input", json.dumps(bad_fields[int(kind[6:])])] if kind.startswith("field-")
                     else inputs_for(kind, tmp_path))
            before = (await status())["stats"]["refused_inputs"]
            await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name",
                           "enqueue", *shape)

            async def refused() -> dict:
                current = await status()
                assert current["stats"]["refused_inputs"] == before + 1, (kind, current["stats"])
                return current

            current = await eventually(refused)
            last = current["rejected"][-1]
            assert last["handler"] == "enqueue" and last["reason"] and len(
                json.dumps(last)) < 1500, (kind, last)
            # the submit update refuses in its validator: with why, and nothing enters history
            rc, _, err = await run_temporal(server_address, "workflow", "update", "execute",
                                            "--workflow-id", wf, "--name", "submit", *shape)
            assert rc != 0 and "entry refused" in err and len(err) < 5000, (kind, rc, err[-500:])
        await good_entry_lands()

        # flush with stray input, and an unreadable payload, change nothing
        await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name", "flush",
                       "--input", nested(600), "--input", "1")
        await run_temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name",
                           "enqueue", "--input", '"x"', "--input-meta", "encoding=no/such-encoding")
        await good_entry_lands()
        final = await status()
        assert len(json.dumps(final["rejected"])) < 64 * 1024
        described = await temporal(server_address, "workflow", "describe",
                                   "--workflow-id", wf, "-o", "json")
        assert json.loads(described)["workflowExecutionInfo"]["status"] in (
            "WORKFLOW_EXECUTION_STATUS_RUNNING", "Running")
    assert final["stats"]["refused_inputs"] == 1 + len(SHAPES) + len(bad_fields)
    assert final["stats"]["landed"] == good


async def test_bad_start_input_fails_the_queue_with_why(server_address, task_queue, make_worker,
                                                         git_remote: GitRemoteFixture):
    fx = git_remote
    cases = [("no-target", [json.dumps({"repo": str(fx.clone)})], "needs 'target'"), (
        "relative", [json.dumps({"repo": "rel", "target": "main"})], "must be an absolute path"),
             ("batch", [json.dumps({"repo": str(fx.clone), "target": "main", "max_batch": 0})],
              "max_batch"), ("state", [json.dumps({"repo": str(fx.clone), "target": "main"}),
                                       json.dumps({"queue": 7})], "bad carried state")]
    async with make_worker():
        await starts_fail_with_why(server_address, task_queue, "MergeQueueWorkflow", cases)
