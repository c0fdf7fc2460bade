"""The reference pages that are generated from the code, and what the others must name.

`make reference` writes the generated pages; tests/test_reference.py fails when a page and the code
disagree, so a flag, a board key or an environment variable added to the code reaches the docs.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("taskfleet", "workflows", "activities")
VARIABLE = re.compile(r"\bTASKFLEET_[A-Z0-9_]*[A-Z0-9]\b")


def variables_in_code() -> set[str]:
    """Every `TASKFLEET_*` name in the product's string literals (help texts included)."""
    found: set[str] = set()
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*.py"):
            if "testing" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.update(VARIABLE.findall(node.value))
    return found


def variables_in_page(path: Path) -> set[str]:
    return set(VARIABLE.findall(path.read_text()))


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _default(action: argparse.Action) -> str:
    if (action.nargs == 0 or action.default in (None, "", argparse.SUPPRESS, False)
            or action.required):
        return "required" if action.required else ""
    return f"`{action.default}`"


def cli_reference() -> str:
    """docs/reference/cli.md: every command and every flag, from the parser itself."""
    from taskfleet.cli.main import build_parser, leaf_commands

    parser = build_parser()
    lines = ["# The taskfleet command: every flag", "",
             "Generated from the command's own parser (`make reference`); "
             "[The taskfleet command](../cli.md)",
             "shows how the commands are used. The connection flags (`--address`, `--namespace`,",
             "`--task-queue`) go before or after the command.", ""]
    for words, command in leaf_commands(parser).items():
        lines += [f"## taskfleet {' '.join(words)}", "",
                  command.description or _help_of(parser, words), "",
                  "| argument | default | what |", "| --- | --- | --- |"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            text = (action.help or "").replace("|", "\\|") % {"default": action.default}
            lines.append(f"| {_flags(action)} | {_default(action)} | {text} |")
        lines.append("")
    return "\n".join(lines)


def _help_of(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> str:
    """The help a command was given in its parent's list of commands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == words[0]:
                    if len(words) == 1:
                        return choice.help or ""
                    return _help_of(action.choices[words[0]], words[1:])
    return ""


def board_keys_reference() -> str:
    """docs/reference/board-keys.md: the key registry the board parser itself uses."""
    from taskfleet.core.boards import keys_table

    return "\n".join([
        "# Board keys", "",
        "Every key a board may set, from the registry the board parser uses (`make reference`).",
        "**Scope**: `board`, a board-wide setting; `task`, a task's own; "
        "`both`, a task's own that the",
        "board may set for every task that does not. A TOML board names them as written; "
        "a markdown board",
        "gets its board-wide settings from the command line (see [Boards](../boards.md)).", "",
        keys_table(),
    ])


GENERATED = {"docs/reference/cli.md": cli_reference,
             "docs/reference/board-keys.md": board_keys_reference}


# What each handler that takes raw input (anyone can send it with the `temporal` CLI, so it is
# parsed in code) accepts: (workflow type, message) -> (what it takes, in words, and the dataclass
# it reads).
RAW_INPUTS: dict[tuple[str, str], tuple[str, str]] = {
    ("GitBatchWorkflow", "start"): ("a config", "taskfleet.core.models.git_batch.GitBatchConfig"),
    ("GitBatchWorkflow", "enqueue"): ("an op, or a list of up to 500",
                                      "taskfleet.core.models.git_batch.GitOp"),
    ("GitBatchWorkflow", "submit"): ("an op", "taskfleet.core.models.git_batch.GitOp"),
    ("GitBatchWorkflow", "flush"): ('nothing, or `{"after": [op ids]}`', ""),
    ("GitBatchWorkflow", "flush_now"): ("nothing", ""),
    ("GitBatchWorkflow", "retry"): ("a failed batch's id (a string)", ""),
    ("MergeQueueWorkflow", "start"): ("a config",
                                      "taskfleet.core.models.merge_queue.MergeQueueConfig"),
    ("MergeQueueWorkflow", "enqueue"): ("an entry", "taskfleet.core.models.merge_queue.QueueEntry"),
    ("MergeQueueWorkflow", "submit"): ("an entry", "taskfleet.core.models.merge_queue.QueueEntry"),
    ("MergeQueueWorkflow", "flush"): ("nothing", ""),
    ("LLMBatchWorkflow", "start"): ("a config", "taskfleet.core.models.llm.LLMBatchConfig"),
    ("LLMBatchWorkflow", "submit"): ("a request", "taskfleet.core.models.llm.LLMRequest"),
    ("LLMBatchWorkflow", "flush"): ("nothing", ""),
    ("LLMTaskWorkflow", "llm_reply"): ("a reply", "taskfleet.core.models.llm.LLMReply"),
    ("PlannerWorkflow", "start"): ("a goal and a clone", "taskfleet.core.models.plan.PlanInput"),
    ("PlannerWorkflow", "llm_reply"): ("a reply", "taskfleet.core.models.llm.LLMReply"),
    ("JudgeWorkflow", "llm_reply"): ("a reply", "taskfleet.core.models.llm.LLMReply"),
    ("LeaseLockWorkflow", "start"): ("a config, or the resource's name",
                                     "taskfleet.core.models.lease_lock.LeaseLockConfig"),
    ("LeaseLockWorkflow", "acquire"): ("a request",
                                       "taskfleet.core.models.lease_lock.AcquireRequest"),
    ("LeaseLockWorkflow", "renew"): ("a lease", "taskfleet.core.models.lease_lock.LeaseRef"),
    ("LeaseLockWorkflow", "release"): ("a lease", "taskfleet.core.models.lease_lock.LeaseRef"),
    ("LeaseLockWorkflow", "renew_lease"): ("a lease", "taskfleet.core.models.lease_lock.LeaseRef"),
    ("LeaseLockWorkflow", "release_lease"): ("a lease",
                                             "taskfleet.core.models.lease_lock.LeaseRef"),
    ("OrchestratorWorkflow", "task_stage"): ("a stage", "taskfleet.core.models.review.TaskStage"),
}
BEHAVIORS = {1: "PINNED", 2: "AUTO_UPGRADE"}


def _type_name(hint: object) -> str:
    import dataclasses
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint):
        return f"[{hint.__name__}](#{hint.__name__.lower()})"
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"object of {_type_name(args[1])}" if args else "object"
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_type_name(a) for a in args)
    return {str: "string", int: "whole number", float: "number",
            bool: "true/false"}.get(hint, getattr(hint, "__name__", str(hint)))


def _dataclasses_in(hint: object, found: dict[str, type]) -> None:
    import dataclasses
    import typing

    if dataclasses.is_dataclass(hint) and hint.__name__ not in found:
        found[hint.__name__] = hint
        for f in dataclasses.fields(hint):
            _dataclasses_in(typing.get_type_hints(hint)[f.name], found)
    for arg in typing.get_args(hint):
        _dataclasses_in(arg, found)


def _default(f) -> str:
    import dataclasses

    if f.default is not dataclasses.MISSING:
        import json

        return "" if f.default in ("", None) else f"`{json.dumps(f.default)}`"
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return "" if value in ([], {}) else f"`{type(value).__name__}`"
    return "required"


def workflows_reference() -> str:
    """docs/reference/workflows.md: every workflow type, its messages, and their JSON shapes."""
    import dataclasses
    import importlib
    import typing

    from temporalio import workflow

    from taskfleet.plugin import WORKFLOWS

    def model(path: str) -> type:
        module, name = path.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)

    lines = ["# Workflows and their messages", "",
             "Every workflow type taskfleet registers, the signals, updates and queries it "
             "answers, and the",
             "JSON each takes and gives, from the code itself (`make reference`). "
             "Field names are the JSON",
             "keys; a field left out takes its default. Handlers marked *raw* take whatever is "
             "sent (the",
             "`temporal` CLI can send anything) and check it in code: a bad message is refused "
             "with the",
             "reason, never wedging the workflow.", ""]
    shapes: dict[str, type] = {}
    for cls in WORKFLOWS:
        d = workflow._Definition.from_class(cls)
        lines += [f"## {d.name}", "",
                  f"Worker Versioning: {BEHAVIORS.get(d.versioning_behavior, 'unspecified')}.", "",
                  "| kind | name | takes | gives |", "| --- | --- | --- | --- |"]
        hints = typing.get_type_hints(d.run_fn)
        start = RAW_INPUTS.get((d.name, "start"))
        takes = ((f"*raw*: {start[0]}" + (f", {_type_name(model(start[1]))}" if start[1] else ""))
                 if start else " ".join(_type_name(t) for t in (d.arg_types or [])))
        lines.append(
            f"| start | `{d.name}` | {takes} | {_type_name(hints.get('return', type(None)))} |")
        for kind, handlers in (("signal", d.signals), ("update", d.updates), ("query", d.queries)):
            for name, handler in sorted(handlers.items()):
                fn_hints = typing.get_type_hints(handler.fn)
                raw = RAW_INPUTS.get((d.name, name))
                args = [v for k, v in fn_hints.items() if k != "return"]
                if raw:
                    takes = f"*raw*: {raw[0]}" + (
                        f", {_type_name(model(raw[1]))}" if raw[1] else "")
                    if raw[1]:
                        _dataclasses_in(model(raw[1]), shapes)
                else:
                    takes = ", ".join(_type_name(a) for a in args) or "nothing"
                gives = _type_name(fn_hints.get("return", type(None))) if kind != "signal" else ""
                for hint in args + [fn_hints.get("return")]:
                    _dataclasses_in(hint, shapes)
                lines.append(f"| {kind} | `{name}` | {takes} | {gives} |")
        if start and start[1]:
            _dataclasses_in(model(start[1]), shapes)
        for t in d.arg_types or []:
            _dataclasses_in(t, shapes)
        _dataclasses_in(hints.get("return"), shapes)
        lines.append("")
    lines += ["## Shapes", ""]
    for name in sorted(shapes):
        kind = shapes[name]
        lines += [f"### {name}", "", " ".join((kind.__doc__ or "").split()), "",
                  "| field | type | default |", "| --- | --- | --- |"]
        types = typing.get_type_hints(kind)
        lines += [f"| `{f.name}` | {_type_name(types[f.name])} | {_default(f)} |"
                  for f in dataclasses.fields(kind)]
        lines.append("")
    return "\n".join(lines).rstrip()


def missing_raw_inputs() -> list[str]:
    """Handlers that take raw input but are not described in RAW_INPUTS."""
    import typing

    from temporalio import workflow

    from taskfleet.plugin import WORKFLOWS

    missing = []
    for cls in WORKFLOWS:
        d = workflow._Definition.from_class(cls)
        for handlers in (d.signals, d.updates):
            for name, handler in handlers.items():
                hints = [v for k, v in typing.get_type_hints(handler.fn).items() if k != "return"]
                if (not hints or typing.Any in hints) and (d.name, name) not in RAW_INPUTS:
                    missing.append(f"{d.name}.{name}")
    return missing


GENERATED["docs/reference/workflows.md"] = workflows_reference


def main() -> None:
    for name, render in GENERATED.items():
        (ROOT / name).write_text(render() + "\n")
        print(f"wrote {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
