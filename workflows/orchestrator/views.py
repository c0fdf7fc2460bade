"""What a run shows: the `progress` query, the Web UI's current details, and its result.

All of it reads the counts kept as statuses change, never a walk over every task of a big board. A
paged run shows the tasks in flight and the last few finished; the run store has every finished one.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from temporalio import workflow

from taskfleet.workflows.orchestrator.landings import Landings
from taskfleet.workflows.orchestrator.run import RunState

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        OrchestratorProgress,
        OrchestratorResult,
        TaskOutcome,
        TaskProgress,
    )
    from taskfleet.core.models.review import STAGE_IMPLEMENTING, STAGE_LANDING

RECENT_REFUSED = 10  # refused `task_stage` signals `progress` lists


class Views:
    def __init__(self, run: RunState, landings: Landings) -> None:
        self.run = run
        self.s = run.s
        self.landings = landings
        self.refused: deque[str] = deque(maxlen=RECENT_REFUSED)

    def _stage_of(self, task_id: str, status: str) -> str:
        if task_id in self.run.running:
            return self.run.stages.get(task_id, STAGE_IMPLEMENTING)
        if status == TASK_SUCCEEDED and task_id in self.s.awaiting_landing.values():
            return STAGE_LANDING
        return ""

    def _progress_of(self, t: TaskOutcome) -> TaskProgress:
        return TaskProgress(t.id, t.status, t.landed, t.reason,
                            self._stage_of(t.id, t.status), t.verdict)

    def progress(self) -> OrchestratorProgress:
        """Counts by state (and landed), running tasks, and every task's status (a paged run: the
        tasks in flight and the last few finished)."""
        run, p = self.run, self.s.paging
        tasks = [self._progress_of(t) for t in self.s.outcomes.values()]
        common = dict(counts=dict(run.tally), running=list(run.running),
                      rejected=list(self.refused))
        if p is None:
            return OrchestratorProgress(tasks=tasks, pushes=len(self.s.landed_batches), **common)
        return OrchestratorProgress(tasks=tasks + list(run.recorder.recent),
                                    pushes=self.landings.pushes(), run_ref=p.run_ref,
                                    repo=run.params.repo, total=p.board.open_tasks,
                                    failed_ids=list(p.failed_ids), **common)

    def refresh(self) -> None:
        run, c, st = self.run, self.run.tally, self.s.stats
        running = [f"{t} ({run.stages[t]})" if t in run.stages else t
                   for t in list(run.running)[:10]]
        judged = st.judge_approved + st.judge_revised + st.judge_rejected
        workflow.set_current_details(
            f"**{run.params.board.name}** on `{run.params.repo}`\n\n"
            f"- pending {c[TASK_PENDING]}, running {c[TASK_RUNNING]} (max {run.max_parallel})\n"
            f"- succeeded {c[TASK_SUCCEEDED]}, failed {c[TASK_FAILED]}, "
            f"cancelled {c[TASK_CANCELLED]}\n"
            f"- landed {c['landed']} in {self.landings.pushes()} push(es)\n"
            + (f"- running: {', '.join(running)}\n" if running else "")
            + self.landings.details()
            + (f"- judge: approve {st.judge_approved}, revise {st.judge_revised}, "
               f"reject {st.judge_rejected}\n" if judged else ""))

    def result(self, tasks: list[TaskOutcome]) -> OrchestratorResult:
        run, stats = self.run, self.s.stats
        started = datetime.fromisoformat(self.s.started_at)
        stats.wall_seconds = round((workflow.now() - started).total_seconds(), 3)
        # Over the tasks' own work, not time waiting on taskfleet (reported beside it, per task).
        stats.speedup = (round(stats.work_seconds / stats.wall_seconds, 2) if stats.wall_seconds
                         else 0.0)
        done = run.tally[TASK_SUCCEEDED] + run.tally[TASK_FAILED]
        if done:
            own = (max(stats.task_seconds - stats.work_seconds, 0.0) + stats.wait_seconds
                   + stats.landing_seconds)
            stats.overhead_seconds_per_task = round(own / done, 4)
        stats.pushes = self.landings.pushes()
        stats.network_savings = max(run.tally["landed"] - stats.pushes, 0)
        stats.largest_history_length = max(stats.largest_history_length,
                                           workflow.info().get_current_history_length())
        p = self.s.paging
        if p is None:
            return OrchestratorResult(tasks=tasks, stats=stats)
        return OrchestratorResult(tasks=tasks, stats=stats, run_ref=p.run_ref, repo=run.params.repo,
                                  recorded=p.recorded, counts=dict(run.tally),
                                  failed_ids=list(p.failed_ids))
