"""Every key a board may set, in one registry that the parser, the docs' table and the planner read,
so none drifts. Type and default come from the `TaskSpec` or `Board` field, unless worked out
when read."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from taskfleet.core.models.orchestrator import Board, TaskSpec

# Scope: board-wide only, task only, or both (board-wide, the default for every task).
BOARD, TASK, BOTH = "board", "task", "both"
ALL, IMPLEMENTER, JUDGE, PLANNER, QUEUE = "all", "implementer", "judge", "planner", "merge queue"
_TYPES = {str: "string", int: "whole number", float: "number", bool: "true/false",
          list[str]: "list of strings"}


@dataclass(frozen=True)
class BoardKey:
    name: str
    type: str  # as a person reads it: string, whole number, number, true/false, list of strings
    default: str
    scope: str  # BOARD, TASK or BOTH
    roles: tuple[str, ...]
    description: str


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (int, float)):
        return f"{value:g}"
    return f"`{value}`" if value != "" else '`""`'


def _key(name: str, scope: str, roles: str | tuple[str, ...], description: str,
         default: str = "") -> BoardKey:
    field = {f.name: f for f in fields(Board if scope == BOARD else TaskSpec)}[name]
    if not default:
        factory = field.default_factory
        default = _shown(factory() if field.default is MISSING  # type: ignore[misc]
                         else field.default)
    return BoardKey(name, _TYPES[field.type], default, scope,  # type: ignore[index]
                    (roles,) if isinstance(roles, str) else roles, description)


KEYS = (
    _key("name", BOARD, ALL,
         "the board's name, in the run's workflow id (`taskfleet-run-<name>-<8 hex>`)",
         "the file's name, without its suffix"),
    _key("base", BOARD, ALL, "the branch tasks start from, and that `merge` lands into",
         "the remote's default branch"),
    _key("max_parallel", BOARD, ALL,
         "at most this many tasks run at once (`--max-parallel` overrides it)"),
    _key("land", BOARD, ALL, "`push` each task branch, `merge` it into `base`, or `queue` it "
         "through the merge queue of `queue_target`"),
    _key("queue_verify", BOARD, QUEUE, "the command run on each merged batch",
         "the board's `verify`"),
    _key("queue_target", BOARD, QUEUE, "the branch the merge queue keeps green", "`base`"),
    _key("queue_max_batch", BOARD, QUEUE, "at most this many entries merged and verified together"),
    _key("queue_max_wait_seconds", BOARD, QUEUE, "the longest an entry waits for a batch to fill"),
    _key("queue_retries", BOARD, QUEUE,
         "times a task the queue sends back is redone on the new tip"),
    _key("queue_parallel", BOARD, QUEUE, "verify runs the merge queue keeps going at once"),
    _key("queue_flake_retries", BOARD, QUEUE,
         "times a red single entry is verified again before it is a culprit"),
    _key("id", TASK, ALL, "the task's id: a letter or digit, then letters, digits, `.`, `_` or `-` "
         "(at most 64)", "(required)"),
    _key("scope", TASK, ALL, "what the task is to do (shown in the prompt)"),
    _key("branch", TASK, ALL, "the task's branch; never the base branch, never shared by two tasks",
         "`task/<id>`"),
    _key("done", TASK, ALL, "`true`: skipped, as `[x]` on a markdown board"),
    _key("run", BOTH, (IMPLEMENTER, PLANNER),
         "the executor command line, run with `sh -c` in the task's worktree"),
    _key("verify", BOTH, ALL, "the verification command; its exit code decides"),
    _key("template", BOTH, IMPLEMENTER,
         "the prompt template: a file name in the templates directory, or template text"),
    _key("task_type", BOTH, ALL, "the kind of task: its prompts show the lessons of its kind"),
    _key("activity_type", BOTH, IMPLEMENTER, "the kind of step, for lessons and the result cache"),
    _key("timeout_seconds", BOTH, ALL, "each command's time limit (a number > 0)"),
    _key("refresh", BOTH, (IMPLEMENTER, JUDGE), "`true` bypasses the result cache"),
    _key("worktree", BOTH, ALL, "`false`: a task that changes nothing runs in an empty scratch "
         "folder, with no worktree, commit or landing"),
    _key("env", BOTH, IMPLEMENTER, "worker variables the task needs (at most 64 names), each one "
         "the worker's `TASKFLEET_TASK_ENV` lets tasks see"),
    _key("implementer", BOTH, (IMPLEMENTER, PLANNER),
         "`anthropic`: Claude makes the change, instead of a `run` command"),
    _key("model", BOTH, (IMPLEMENTER, JUDGE), "the Claude model id",
         "`TASKFLEET_MODEL` on the worker, else taskfleet's default model"),
    _key("max_tokens", BOTH, IMPLEMENTER, "the most tokens Claude may answer with, per request"),
    _key("context", BOTH, (IMPLEMENTER, PLANNER),
         "repo-relative globs of files Claude is shown, read from the base commit (200 KB in all)"),
    _key("max_attempts", BOTH, (IMPLEMENTER, JUDGE),
         "attempts per task: the first, then fix rounds and the judge's revise rounds"),
    _key("llm_batch", BOTH, (IMPLEMENTER, JUDGE),
         "`true`: model requests go in Message Batches; `false`: one direct call each"),
    _key("llm_batch_max_size", BOTH, (IMPLEMENTER, JUDGE),
         "a batch is sent when this many requests are queued"),
    _key("llm_batch_max_age_seconds", BOTH, (IMPLEMENTER, JUDGE),
         "a batch is sent at most this long after its oldest request was queued"),
    _key("judge", BOTH, JUDGE, "`anthropic`: a Claude judge reviews the change before it lands"),
    _key("judge_model", BOTH, JUDGE, "the Claude judge's model id", "the task's model"),
    _key("judge_template", BOTH, JUDGE, "the judge's prompt template (a name, or template text)"),
    _key("judge_max_tokens", BOTH, JUDGE, "the most tokens the Claude judge may answer with"),
    _key("judge_run", BOTH, JUDGE,
         "a judge command: the diff on stdin; exit 0 approve, 2 revise, else reject"),
)

# What the parser allows: `tasks` holds the task tables (`[[tasks]]` or `tasks = [...]`).
BOARD_KEYS = frozenset(k.name for k in KEYS if k.scope != TASK) | {"tasks"}
TASK_KEYS = frozenset(k.name for k in KEYS if k.scope != BOARD)
DEFAULTABLE = tuple(k.name for k in KEYS if k.scope == BOTH)  # board-wide defaults of every task
BOARD_FIELDS = tuple(k.name for k in KEYS if k.scope == BOARD and k.name != "name")  # on `Board`
QUEUE_KEYS = tuple(k.name for k in KEYS if QUEUE in k.roles)


def keys_table() -> str:
    """The registry as a markdown table, for the docs' reference page."""
    lines = ["| key | type | default | scope | roles | what |", "|" + " --- |" * 6]
    lines += [f"| `{k.name}` | {k.type} | {k.default} | {k.scope} | {', '.join(k.roles)} | "
              f"{k.description} |" for k in KEYS]
    return "\n".join(lines) + "\n"
