"""The planner's activities: the request that asks Claude for a board, built from the goal, the
repository's file list (bounded), the context files and the lessons of past refused boards, kept in
the payload store; and the stored answer checked by the board parser `taskfleet run` uses."""

from __future__ import annotations

import asyncio

from git import Repo
from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.model_io.payload_store import PayloadStore
from taskfleet.activities.model_io.repo_files import (
    RepoReadError,
    base_commit,
    context_files,
    file_names,
    listed,
)
from taskfleet.activities.model_io.stored_calls import tool_input
from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.result_cache import cache_key
from taskfleet.activities.services.template_cache import TemplateCache, TemplateRenderError
from taskfleet.core.llm_settings import LLMSettings
from taskfleet.core.models.lessons import LessonQuery
from taskfleet.core.models.payload import compact
from taskfleet.core.models.plan import PlanAnswer, PlanCheck, PlanInput, PreparedPlan
from taskfleet.core.names import ACTIVITY_PLAN_CHECK, ACTIVITY_PLAN_PREPARE
from taskfleet.core.plan_board import BoardRefused, planned_board

TOOL_NAME = "submit_board"
PLAN_LESSONS = 10
MAX_FILES_LISTED = 400  # of the repository's file list, in the prompt
MAX_FILE_LIST_CHARS = 24_000
SUBMIT_BOARD_TOOL = {
    "name": TOOL_NAME,
    "description": "Submit the board: the tasks that together reach the goal.",
    "input_schema": {
        "type": "object",
        "properties": {
            "name": {"type": "string",
                     "description": "the board's name: a few words, lower case, dashes"},
            "tasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string",
                               "description": "letters, digits, '.', '_' or '-'; unique"},
                        "scope": {"type": "string",
                                  "description": "what the task changes, for its implementer"},
                        "verify": {"type": "string",
                                   "description": "shell command; exit 0 when the task is done"},
                        "run": {"type": "string",
                                "description": "shell command that makes the change"},
                        "implementer": {"type": "string", "enum": ["anthropic"],
                                        "description": "instead of run: Claude makes the change"},
                        "context": {"type": "array", "items": {"type": "string"},
                                    "description": "repo-relative globs of files Claude is shown "
                                                   "(with implementer)"},
                    },
                    "required": ["id", "scope", "verify"],
                },
            },
        },
        "required": ["name", "tasks"],
    },
}
PLANNER_RULES = (
    "You are a planner working for taskfleet, which runs many software tasks in parallel, each on "
    "its own git branch from the same base, and lands each one whose verify command exits 0. You "
    "answer only through the submit_board tool. Each task needs a unique id, a scope its "
    "implementer can act on alone, a verify command that checks exactly that task, and either a "
    "`run` shell command that makes the change or implementer = \"anthropic\" (Claude makes it; "
    "list the files it must see in `context`). Commands run with `sh -c` in the task's checkout "
    "and get TASKFLEET_TASK_ID and TASKFLEET_PROMPT_FILE in their environment. Prefer a few "
    "well-scoped tasks to many tiny ones.")


class PlanActivities:
    def __init__(self, llm: LLMSettings, lessons: LessonsIndex, templates: TemplateCache,
                 store: PayloadStore) -> None:
        self.llm = llm
        self.lessons = lessons
        self.templates = templates
        self.store = store

    def activities(self) -> list:
        return [self.prepare, self.check]

    @activity.defn(name=ACTIVITY_PLAN_PREPARE)
    async def prepare(self, params: PlanInput) -> PreparedPlan:
        """The `messages.create` request of a plan (its system prefix marked for prompt caching)."""
        commit, names, files = await asyncio.to_thread(self._read, params)
        shown = listed(names, MAX_FILES_LISTED, MAX_FILE_LIST_CHARS)
        lessons = self.lessons.query(LessonQuery(activity_type="plan", limit=PLAN_LESSONS))
        context = {"goal": params.goal, "base": params.base, "base_commit": commit,
                   "max_tasks": params.max_tasks, "files": shown, "files_total": len(names),
                   "context": [{"path": path, "text": text} for path, text in files],
                   "lessons": [vars(m.lesson) for m in lessons]}
        try:
            prompt = (await self.templates.render_with_limit(params.template, context)).text
        except TemplateRenderError as err:
            raise ApplicationError(f"plan: {err}", type="TemplateError",
                                   non_retryable=True) from None
        request = {"model": params.model or self.llm.default_model, "max_tokens": params.max_tokens,
                   "system": [{"type": "text", "text": PLANNER_RULES,
                               "cache_control": {"type": "ephemeral"}}],
                   "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
                   "tools": [SUBMIT_BOARD_TOOL], "tool_choice": {"type": "tool", "name": TOOL_NAME}}
        return compact(PreparedPlan(
            request=await self.store.put_json(request), model=request["model"], base_commit=commit,
            files_listed=len(shown), files_total=len(names),
            prompt_hash=cache_key(prompt=prompt)[:16]))

    @activity.defn(name=ACTIVITY_PLAN_CHECK)
    async def check(self, answer: PlanAnswer) -> PlanCheck:
        """The stored answer's board, checked as `taskfleet run` checks one, or why not."""
        called = tool_input(await self.store.get_json(answer.reply), TOOL_NAME)
        if called is None:
            return PlanCheck(problems=["the model did not call submit_board"])
        try:
            board = planned_board(called, answer.base, answer.goal, answer.max_tasks)
        except BoardRefused as err:
            return PlanCheck(problems=err.problems)
        return PlanCheck(board_toml=board.text, name=board.name, task_ids=board.task_ids)

    def _read(self, params: PlanInput) -> tuple[str, list[str], list[tuple[str, str]]]:
        try:
            repo = Repo(params.repo)
        except Exception as err:  # noqa: BLE001 - not a repository: one line, no retry
            raise ApplicationError(
                f"plan: {params.repo} is not a git repository here ({type(err).__name__})",
                type="BadTaskSetup", non_retryable=True) from None
        try:
            commit = base_commit(repo, params.base, params.remote)
            names = file_names(repo, commit)
            files = context_files(repo, commit, params.context, self.llm.context_max_bytes,
                                  params.base, names)
            return commit, names, files
        except RepoReadError as err:
            raise ApplicationError(f"plan: {err}", type="BadTaskSetup",
                                   non_retryable=True) from None
        finally:
            repo.close()
