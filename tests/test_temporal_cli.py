"""Users drive the batcher with the official `temporal` CLI: the README's commands, for real.

Anyone with the CLI can send any handler any input: none, several, the wrong type, 1.5 MB, JSON
nested 600 deep. None of it may wedge the batcher: after each, `status` answers and a good op lands.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from taskfleet.clients.git_batcher import git_batch_workflow_id
from taskfleet.devserver.server import find_temporal_cli
from tests.conftest import GitRemoteFixture, eventually


async def run_temporal(address: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        find_temporal_cli(), *args, "--address", address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def temporal(address: str, *args: str) -> str:
    rc, out, err = await run_temporal(address, *args)
    assert rc == 0, err
    return out


async def test_signal_with_start_flush_and_query_from_temporal_cli(
    server_address: str, task_queue: str, make_worker, git_remote: GitRemoteFixture
):
    fx = git_remote
    wt = fx.worktree("cli/temporal")
    fx.change(wt, "t.txt", "from the temporal cli\n")
    wf = git_batch_workflow_id(str(fx.clone), "origin", task_queue)
    op = {"op_type": "commit", "branch": "cli/temporal", "worktree": str(wt),
          "message": "via temporal", "id": "t-1"}
    async with make_worker():
        await temporal(server_address, "workflow", "signal-with-start", "--workflow-id", wf,
                       "--type", "GitBatchWorkflow", "--task-queue", task_queue, "--input",
                       json.dumps({"repo": str(fx.clone), "max_batch_age_seconds": 3600}),
                       "--signal-name", "enqueue", "--signal-input", json.dumps(op))
        await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name",
                       "enqueue", "--input", json.dumps({"op_type": "push", "branch": "--force"}))

        async def queued() -> dict:
            out = await temporal(server_address, "workflow", "query", "--workflow-id", wf, "--name",
                                 "status", "-o", "json")
            status = json.loads(out)["queryResult"][0]
            assert len(status["queue"]) == 1 and len(status["rejected"]) == 1, status
            return status

        status = await eventually(queued)
        assert "starts with '-'" in status["rejected"][0]["reason"]
        out = await temporal(server_address, "workflow", "update", "execute", "--workflow-id", wf,
                             "--name", "flush_now", "-o", "json")
        assert '"landed"' in out
    assert fx.remote_ref("cli/temporal")
    assert fx.pushes() == 1


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def inputs_for(kind: str, files: Path) -> list[str]:
    """CLI arguments carrying one hostile input shape."""
    if kind == "none":
        return []
    if kind == "two":
        return ["--input", json.dumps({"op_type": "push", "branch": "a"}), "--input",
                json.dumps({"op_type": "push", "branch": "b"})]
    if kind == "string":
        return ["--input", json.dumps("just a string")]
    if kind == "number":
        return ["--input", "42"]
    if kind == "huge":
        path = files / "huge-op.json"
        path.write_text(
            json.dumps({"op_type": "push", "branch": "huge", "message": "x" * (1536 * 1024)}))
        return ["--input-file", str(path)]
    if kind == "deep":
        return ["--input", nested(600)]
    if kind == "deep-object":
        return ["--input", '{"op_type": "push", "branch": "d", "files": ' + nested(600) + "}"]
    raise AssertionError(kind)


SHAPES = ["none", "two", "string", "number", "huge", "deep", "deep-object"]


async def test_no_input_shape_from_temporal_cli_wedges_the_batcher(
    server_address: str, task_queue: str, make_worker, git_remote: GitRemoteFixture, tmp_path: Path
):
    fx = git_remote
    wf = git_batch_workflow_id(str(fx.clone), "origin", task_queue)
    start = json.dumps({"repo": str(fx.clone), "max_batch_age_seconds": 3600})
    good = 0

    async def status() -> dict:
        out = await temporal(server_address, "workflow", "query", "--workflow-id", wf, "--name",
                             "status", "-o", "json")
        return json.loads(out)["queryResult"][0]

    async def good_op_lands() -> None:
        """A good op sent now is accepted and lands: the batcher is alive."""
        nonlocal good
        good += 1
        branch = f"cli/good-{good}"
        wt = fx.worktree(branch)
        fx.change(wt, f"{good}.txt", f"{good}\n")
        op = {"op_type": "commit", "branch": branch, "worktree": str(wt), "message": f"good {good}",
              "id": f"good-{good}"}
        await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name",
                       "enqueue", "--input", json.dumps(op))
        out = await temporal(server_address, "workflow", "update", "execute", "--workflow-id", wf,
                             "--name", "flush_now", "-o", "json")
        [outcome] = json.loads(out)["result"]["outcomes"]
        assert outcome["status"] == "landed", outcome
        assert outcome["branch_commit"] == fx.remote_ref(branch)

    async with make_worker():
        await temporal(server_address, "workflow", "start", "--workflow-id", wf, "--type",
                       "GitBatchWorkflow", "--task-queue", task_queue, "--input", start)
        await good_op_lands()

        for kind in SHAPES:
            # signal enqueue: always accepted by the server; the batcher records a bounded rejection
            before = (await status())["stats"]["rejected_ops"]
            await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name",
                           "enqueue", *inputs_for(kind, tmp_path))

            async def rejected() -> dict:
                current = await status()
                assert current["stats"]["rejected_ops"] == before + 1, (kind, current["stats"])
                return current

            current = await eventually(rejected)
            entry = current["rejected"][-1]
            assert len(json.dumps(entry)) < 1500, (kind, len(json.dumps(entry)))
            assert entry["handler"] == "enqueue" and entry["reason"]
            await good_op_lands()

            # update submit: refused by the validator with a reason; nothing enters history
            rc, _, err = await run_temporal(server_address, "workflow", "update", "execute",
                                            "--workflow-id", wf, "--name", "submit",
                                            *inputs_for(kind, tmp_path))
            assert rc != 0 and "git op refused" in err, (kind, rc, err[-500:])
            assert len(err) < 5000, (kind, len(err))
            await good_op_lands()

        # a payload no converter can read (unknown encoding): the SDK drops the signal, refuses the
        # update
        for name in ("enqueue", "submit", "retry"):
            verb = ["signal"] if name == "enqueue" else ["update", "execute"]
            await run_temporal(server_address, "workflow", *verb, "--workflow-id", wf, "--name",
                               name, "--input", '"x"', "--input-meta", "encoding=no/such-encoding")
            await good_op_lands()

        # flush and flush_now with stray input still work
        await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name", "flush",
                       "--input", '"now"', "--input", "1")
        out = await temporal(server_address, "workflow", "update", "execute", "--workflow-id", wf,
                             "--name", "flush_now", "--input", nested(600))
        assert "empty" in out

        # retry with no input, two inputs, a number, an unknown batch: refused, with why
        for args in ([], ["--input", '"batch-1"', "--input", '"batch-2"'], ["--input", "7"],
                     ["--input", '"batch-99"'], ["--input", nested(600)]):
            rc, _, err = await run_temporal(server_address, "workflow", "update", "execute",
                                            "--workflow-id", wf, "--name", "retry", *args)
            assert rc != 0 and ("input" in err or "not a failed batch" in err
                                or "must be a string" in err), (args, err)
        await good_op_lands()

        final = await status()
        carried = {k: final[k] for k in ("queue", "rejected", "executed_batches", "failed_batches")}
        assert len(json.dumps(carried)) < 64 * 1024, len(json.dumps(carried))
        described = await temporal(server_address, "workflow", "describe",
                                   "--workflow-id", wf, "-o", "json")
        assert json.loads(described)["workflowExecutionInfo"]["status"] in (
            "WORKFLOW_EXECUTION_STATUS_RUNNING", "Running")
    assert final["stats"]["rejected_ops"] == len(SHAPES)
    assert final["stats"]["landed_ops"] == good


async def test_bad_start_input_fails_the_batcher_with_why(
    server_address: str, task_queue: str, make_worker, git_remote: GitRemoteFixture
):
    """A start by hand with a bad config or a bad carried state fails with a message; it never
    leaves a batcher whose first workflow task fails forever."""
    fx = git_remote
    cases = [
        ("bad-config", [json.dumps({"repo": "relative/path"})], "must be an absolute path"),
        ("bad-state", [json.dumps({"repo": str(fx.clone)}), json.dumps("junk")],
         "bad carried state"),
        ("bad-state-field", [json.dumps({"repo": str(fx.clone)}), json.dumps({"queue": 7})],
         "bad carried state"),
    ]
    async with make_worker():
        await starts_fail_with_why(server_address, task_queue, "GitBatchWorkflow", cases)


async def starts_fail_with_why(server_address: str, task_queue: str, workflow_type: str,
                               cases: list[tuple[str, list[str], str]]) -> None:
    """Start `workflow_type` by hand with each case's inputs: each run fails,
    its history saying why."""
    for name, inputs, expected in cases:
        wf = f"{name}-{task_queue}"
        args = [a for i in inputs for a in ("--input", i)]
        await temporal(server_address, "workflow", "start", "--workflow-id", wf, "--type",
                       workflow_type, "--task-queue", task_queue, *args)

        async def failed() -> str:
            out = await temporal(server_address, "workflow", "describe",
                                 "--workflow-id", wf, "-o", "json")
            info = json.loads(out)["workflowExecutionInfo"]
            assert info["status"] in ("WORKFLOW_EXECUTION_STATUS_FAILED", "Failed"), info["status"]
            return await temporal(server_address, "workflow", "show",
                                  "--workflow-id", wf, "-o", "json")

        history = await eventually(failed)
        assert expected in history, (name, history[-2000:])
