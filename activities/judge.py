"""The judge's activities: a Claude judge's request (in the payload store) and its answer checked
against `submit_review`, or a judge command in the task's worktree with the diff on stdin; a verdict
leaves a cached result and a lesson. Both kinds see the task's diff, scope, acceptance, verify
output and earlier judge lessons, through its `judge_template`."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.git.worktrees import BranchCheckedOut
from taskfleet.activities.llm_api import submit_request
from taskfleet.activities.model_io.stored_calls import stored_edits, stored_task, tool_input
from taskfleet.activities.model_role import ModelRole
from taskfleet.activities.processes.executor_records import no_detached_git_maintenance
from taskfleet.activities.services.lessons_index import normalize_pattern
from taskfleet.activities.services.result_cache import cache_key
from taskfleet.activities.services.template_cache import TemplateRenderError
from taskfleet.activities.task_runner import needs_a_person, report_stage, task_file_stem
from taskfleet.core.ids import slug
from taskfleet.core.models.judge import (
    JUDGE_BY_COMMAND,
    JudgeAnswer,
    JudgeOutcome,
    JudgeRecord,
    JudgeRequest,
    JudgeVerdict,
    PreparedJudge,
)
from taskfleet.core.models.lessons import Lesson, LessonQuery
from taskfleet.core.models.llm import SubmitInput
from taskfleet.core.models.orchestrator import TaskInput
from taskfleet.core.models.payload import compact
from taskfleet.core.models.review import (
    STAGE_JUDGING,
    VERDICT_APPROVE,
    VERDICT_REJECT,
    VERDICT_REVISE,
    JudgeTally,
    Review,
    ReviewComment,
)
from taskfleet.core.names import (
    ACTIVITY_JUDGE_COMMAND,
    ACTIVITY_JUDGE_PREPARE,
    ACTIVITY_JUDGE_RECORD,
    ACTIVITY_JUDGE_VERDICT,
)
from taskfleet.core.review_schema import (
    MAX_COMMENTS,
    MAX_REASONS,
    TEXT_MAX_CHARS,
    ReviewInvalid,
    parse_review,
    review_text,
)

TOOL_NAME = "submit_review"
JUDGE_LESSONS = 10
STAT_MAX_CHARS = 8000
VERIFY_OUTPUT_MAX_CHARS = 3000
JUDGE_EXIT = {0: VERDICT_APPROVE, 2: VERDICT_REVISE}  # any other exit code (or a timeout): reject
_COMMENT_LINE = re.compile(r"^([^\s:][^:]*):(\d+):\s*(.+)$")
SUBMIT_REVIEW_TOOL = {
    "name": TOOL_NAME,
    "description": "Submit your review of the change: a verdict, its reasons, and comments tied "
                   "to lines.",
    "input_schema": {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["approve", "revise", "reject"],
                        "description": "approve: it lands; revise: the implementer fixes it; "
                                       "reject: it never lands"},
            "reasons": {"type": "array", "items": {"type": "string"},
                        "description": "why, one point each"},
            "comments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "line": {"type": "integer",
                                 "description": "line in the new file (optional)"},
                        "text": {"type": "string"},
                    },
                    "required": ["path", "text"],
                },
            },
        },
        "required": ["verdict", "reasons", "comments"],
    },
}
JUDGE_RULES = (
    "You are a judge (a code reviewer) working for taskfleet. You answer only through the "
    "submit_review tool. A task's change reaches you after its verify command passed; your verdict "
    "decides what happens next: approve lands it, revise sends your reasons and comments back to "
    "its implementer for another attempt, reject fails the task and nothing lands. Tie comments to "
    "a path and, where you can, a line of the new file.")


@dataclass
class _Seen:
    """What a judge sees of a task's commit, and the rendered prompt."""

    base_commit: str
    tree: str
    diff: str  # whole
    prompt: str  # rendered with the diff cut to the Claude judge's size
    key_prompt: str  # the same with the verify output's numbers, hashes and temp paths stripped


def _git(repo: str, *args: str) -> bytes:
    done = subprocess.run(["git", "-C", repo, *args], capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    if done.returncode != 0:
        raise ApplicationError(f"git {' '.join(args[:2])} in {repo}: "
                               f"{done.stderr.decode(errors='replace').strip()[:300]}",
                               type="JudgeSetupError")
    return done.stdout


def verify_output(log_tail: str) -> str:
    """The verify command's own output: what follows its `$ (verify) ...` line in the log's tail."""
    marker = log_tail.rfind("$ (verify) ")
    if marker >= 0:
        newline = log_tail.find("\n", marker)
        log_tail = log_tail[newline + 1:] if newline >= 0 else ""
    return log_tail.strip()[-VERIFY_OUTPUT_MAX_CHARS:]


def command_review(code: int | None, stdout: str, command: str, timeout: float) -> Review:
    """Verdict by exit code; stdout lines are the reasons, `path:line: text` lines comments too."""
    verdict = JUDGE_EXIT.get(code, VERDICT_REJECT) if code is not None else VERDICT_REJECT
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    comments = [ReviewComment(path=m.group(1), line=int(m.group(2)),
                              text=m.group(3)[:TEXT_MAX_CHARS])
                for m in map(_COMMENT_LINE.match, lines) if m][:MAX_COMMENTS]
    reasons = [line[:TEXT_MAX_CHARS] for line in lines[:MAX_REASONS]]
    if code is None:
        reasons.insert(0, f"the judge command timed out after {timeout:g}s")
    elif not reasons and verdict != VERDICT_APPROVE:
        reasons = [f"the judge command `{command}` exited with {code} and printed no reasons"]
    return Review(verdict=verdict, reasons=reasons, comments=comments)


def count(tally: JudgeTally, review: Review) -> None:
    tally.approved += review.verdict == VERDICT_APPROVE
    tally.revised += review.verdict == VERDICT_REVISE
    tally.rejected += review.verdict == VERDICT_REJECT


def review_of(data: Any) -> Review:
    """A cached review (stored as JSON) back as a `Review`."""
    comments = [ReviewComment(**c) for c in data.get("comments", [])]
    return Review(verdict=data["verdict"], reasons=list(data.get("reasons", [])), comments=comments)


class JudgeActivities(ModelRole):
    def activities(self) -> list[Any]:
        return [self.prepare, self.run_command, self.record, self.verdict]

    async def _seen(self, request: JudgeRequest, diff_cap: int, params: TaskInput) -> _Seen:
        task = params.task
        base, tree, diff, stat = await asyncio.to_thread(self._read, params, request.commit)
        shown = (diff if len(diff) <= diff_cap
                 else diff[: diff.rfind("\n", 0, diff_cap) + 1 or diff_cap])
        output = verify_output(request.verify_tail)
        lessons = self.lessons.query(
            LessonQuery(task_type=task.task_type, activity_type="judge", limit=JUDGE_LESSONS))
        context = {"task": asdict(task), "board": {"base": params.base, "land": params.land},
                   "attempt": request.attempt, "commit": request.commit, "base_commit": base,
                   "diff": shown, "diff_bytes": len(diff), "diff_cut": len(shown) < len(diff),
                   "diff_stat": stat[:STAT_MAX_CHARS], "verify_output": output,
                   "lessons": [asdict(m.lesson) for m in lessons]}
        try:
            prompt = (await self.templates.render_with_limit(task.judge_template, context)).text
            keyed = (await self.templates.render_with_limit(
                task.judge_template, {**context, "verify_output": normalize_pattern(output)})).text
        except TemplateRenderError as err:
            raise ApplicationError(f"task {task.id}: judge template: {err}", type="TemplateError",
                                   non_retryable=True) from None
        return _Seen(base_commit=base, tree=tree, diff=diff, prompt=prompt, key_prompt=keyed)

    @staticmethod
    def _read(params: TaskInput, commit: str) -> tuple[str, str, str, str]:
        """The task's base commit (where its branch left base), the commit's tree, diff, stat."""
        repo = params.repo
        base = ""
        for ref in (f"refs/heads/{params.base}", f"refs/remotes/{params.remote}/{params.base}"):
            done = subprocess.run(["git", "-C", repo, "merge-base", ref, commit],
                                  capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=60)
            if done.returncode == 0:
                base = done.stdout.strip()
                break
        if not base:
            raise ApplicationError(f"task {params.task.id}: commit {commit[:12]} shares no history "
                                   f"with {params.base} in {repo}", type="BadTaskSetup",
                                   non_retryable=True)
        tree = _git(repo, "rev-parse", f"{commit}^{{tree}}").decode().strip()
        flags = ("--no-color", "--no-ext-diff", "--no-renames")
        diff = _git(repo, "diff", *flags, base, commit).decode(errors="replace")
        stat = _git(repo, "diff", "--stat=100", *flags, base, commit).decode(errors="replace")
        return base, tree, diff, stat.rstrip() or "(no file changed)"

    # --- a Claude judge ---------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_JUDGE_PREPARE)
    async def prepare(self, request: JudgeRequest, submit: SubmitInput | None = None) -> Any:
        """The stored request (rules as a cached system prefix, `submit_review` forced), its cache
        key and any cached verdict; with `submit`, sent to the batcher unless cached."""
        params = request.task_input
        if params is None:  # stored by the task's own steps
            assert request.task is not None
            params = await stored_task(self.store, request.task)
        task = params.task
        seen = await self._seen(request, self.llm.judge_diff_max_bytes, params)
        request_params = {
            "model": task.judge_model or task.model or self.llm.default_model,
            "max_tokens": task.judge_max_tokens,
            "system": [{"type": "text", "text": JUDGE_RULES,
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": seen.prompt}]}],
            "tools": [SUBMIT_REVIEW_TOOL],
            "tool_choice": {"type": "tool", "name": TOOL_NAME},
        }
        keyed = {**request_params, "messages": [
            {"role": "user", "content": [{"type": "text", "text": seen.key_prompt}]}]}
        key = cache_key(kind="judge", params=keyed, tree=seen.tree)
        stored = await self.store.put_json(request_params)
        prepared = PreparedJudge(request=stored, model=request_params["model"], cache_key=key,
                                 diff_bytes=len(seen.diff))
        cached = None if task.refresh else self.results.get(f"judge:{key}")
        if cached is not None:
            prepared.cached = review_of(cached)
        elif submit is not None:
            submit.request.params_ref = prepared.request
            await submit_request(self.llm, submit)
            prepared.submitted = True
        if request.report_stage:
            await report_stage(params, STAGE_JUDGING)
        return compact(prepared)

    @activity.defn(name=ACTIVITY_JUDGE_RECORD)
    async def record(self, record: JudgeRecord) -> None:
        """A Claude verdict: kept for the same request on the same tree; a lesson unless approve."""
        if record.cache_key:
            self.results.put(f"judge:{record.cache_key}", asdict(record.review))
        await self._lesson(record.task_input, record.review, record.commit, "anthropic")

    @activity.defn(name=ACTIVITY_JUDGE_VERDICT)
    async def verdict(self, answer: JudgeAnswer) -> JudgeVerdict:
        """The stored answer checked against `submit_review`'s schema; a review that fits is kept as
        `record` keeps one, and an approved change's edits go into the result cache."""
        called = tool_input(await self.store.get_json(answer.reply), TOOL_NAME)
        if called is None:
            return JudgeVerdict(problem="the answer did not call submit_review")
        try:
            review = parse_review(called)
        except ReviewInvalid as err:
            return JudgeVerdict(problem=str(err))
        if answer.cache_key:
            self.results.put(f"judge:{answer.cache_key}", asdict(review))
        if review.verdict == VERDICT_APPROVE and answer.edits and answer.edits_cache_key:
            edits, summary = await stored_edits(self.store, answer.edits)
            self.results.put(f"llm:{answer.edits_cache_key}", {"edits": edits, "summary": summary})
        if review.verdict != VERDICT_APPROVE:
            params = answer.task_input
            if params is None and answer.task is not None:
                params = await stored_task(self.store, answer.task)
            if params is not None:
                await self._lesson(params, review, answer.commit, "anthropic")
        return compact(JudgeVerdict(review=review))

    async def _lesson(self, params: TaskInput, review: Review, commit: str, judge: str) -> None:
        if review.verdict == VERDICT_APPROVE:
            return
        task = params.task
        lesson = Lesson(task_type=task.task_type, activity_type="judge",
                        failure_type=f"judge_{review.verdict}",
                        failure_msg=review_text(review)[:4000],
                        metadata={"task_id": task.id, "branch": task.branch, "run": params.run_key,
                                  "commit": commit, "judge": judge})
        try:
            await asyncio.to_thread(self.lessons.record, lesson)
        except (OSError, ValueError) as err:
            activity.logger.warning("could not record a lesson for %s: %s", task.id, err)

    # --- a judge command --------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_JUDGE_COMMAND)
    async def run_command(self, request: JudgeRequest) -> JudgeOutcome:
        """`judge_run` in a worktree of the task's commit, through the executor (its own process
        group, the task's timeout, reaped if the worker dies), the whole diff on stdin."""
        params = request.task_input
        assert params is not None, "a judge command's request carries its task inline"
        task = params.task
        outcome = JudgeOutcome(source=JUDGE_BY_COMMAND, tally=JudgeTally())
        seen = await self._seen(request, max(self.llm.judge_diff_max_bytes, 1), params)
        key = cache_key(kind="judge-command", command=task.judge_run, diff=seen.diff,
                        prompt=seen.key_prompt, tree=seen.tree)
        cached = None if task.refresh else self.results.get(f"judge:{key}")
        if cached is not None:
            outcome.review, outcome.cache_hit, outcome.tally.cache_hits = review_of(cached), True, 1
            count(outcome.tally, outcome.review)
            return outcome
        run_dir = self.settings.logs_dir / slug(params.run_key, 120)
        stem = f"{task_file_stem(task.id)}.judge-{request.round}"
        files = {name: run_dir / f"{stem}.{name}" for name in ("diff", "prompt.md", "out")}
        await asyncio.to_thread(_write_files, files, seen)
        log_path = run_dir / f"{task_file_stem(task.id)}.log"
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        try:
            async with self.workspace.checkout(params.repo, task.branch, request.commit,
                                               heartbeat) as worktree:
                env = {**_without_api_keys(), "TASKFLEET_TASK_ID": task.id,
                       "TASKFLEET_BRANCH": task.branch, "TASKFLEET_BASE": params.base,
                       "TASKFLEET_WORKTREE": str(worktree.path), "TASKFLEET_COMMIT": request.commit,
                       "TASKFLEET_BASE_COMMIT": seen.base_commit,
                       "TASKFLEET_PROMPT_FILE": str(files["prompt.md"])}
                no_detached_git_maintenance(env)
                with open(log_path, "a+b") as log, open(files["diff"], "rb") as diff, \
                        open(files["out"], "w+b") as out:
                    async with self.workspace.commands(heartbeat) as run:
                        ran = await run(task.judge_run, worktree.path, env, log,
                                        task.timeout_seconds, "judge", stdin=diff, stdout=out)
                    out.seek(0)
                    stdout = out.read(64 * 1024).decode(errors="replace")
        except BranchCheckedOut as err:
            raise needs_a_person(err) from None
        review = command_review(None if ran.timed_out else ran.exit_code, stdout, task.judge_run,
                                task.timeout_seconds)
        outcome.review, outcome.tally.calls = review, 1
        count(outcome.tally, review)
        self.results.put(f"judge:{key}", asdict(review))
        await self._lesson(params, review, request.commit, "command")
        return outcome


def _write_files(files: dict[str, Path], seen: _Seen) -> None:
    """The diff (the judge's stdin) and its prompt beside the task's log: outside the worktree."""
    files["diff"].parent.mkdir(parents=True, exist_ok=True)
    files["diff"].write_text(seen.diff)
    files["prompt.md"].write_text(seen.prompt)


def _without_api_keys() -> dict[str, str]:
    """A judge command's environment: the worker's, without the API credentials."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
