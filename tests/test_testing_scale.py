"""The scale harness's history inspector, on a real server: every run of a chain,
its largest payload."""

from __future__ import annotations

from temporalio import workflow

from tests.scale_support import history_figures


@workflow.defn(name="ChainOfBlobs", sandboxed=False)
class ChainOfBlobs:
    """Carries `blob` through `runs_left` continue-as-news: each run's input is the blob."""

    @workflow.run
    async def run(self, blob: str, runs_left: int) -> int:
        if runs_left:
            workflow.continue_as_new(args=[blob, runs_left - 1])
        return len(blob)


async def test_history_figures_follow_the_chain_and_find_the_largest_payload(
        client, make_worker, task_queue):
    blob = "x" * 100_000
    async with make_worker(workflows=[ChainOfBlobs]):
        handle = await client.start_workflow("ChainOfBlobs", args=[blob, 2],
                                             id=f"chain-{task_queue}", task_queue=task_queue)
        assert await handle.result() == 100_000
    figures = await history_figures(client, handle.id)
    assert len(figures.runs) == 3
    first = figures.runs[0]
    assert first.run_id == handle.first_execution_run_id
    assert figures.runs[-1].run_id == (await handle.describe()).run_id
    for run in figures.runs:
        # the blob as a JSON string in its payload, plus the payload's metadata
        assert 100_002 <= run.largest_payload_bytes < 100_200, run
        assert run.events >= 5 and run.bytes > run.largest_payload_bytes
    assert "WORKFLOW_EXECUTION_STARTED" in first.largest_payload_event
    assert (figures.as_dict()["runs"] == 3
            and figures.largest_payload_bytes == max(r.largest_payload_bytes for r in figures.runs))
