"""`taskfleet lessons query|stats`: ask a worker's in-memory lessons index."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from dataclasses import asdict

from temporalio.client import WorkflowFailureError

from taskfleet.cli.common import client_for, examples
from taskfleet.clients.served import NoWorkerServes, served
from taskfleet.core.errors import root_cause_message
from taskfleet.core.models.lessons import LessonQuery, LessonsAnswer
from taskfleet.core.names import LESSONS_QUERY_WORKFLOW


async def lessons(args: argparse.Namespace) -> int:
    query = None
    if args.lessons_command == "query":
        query = LessonQuery(task_type=args.task_type or "", activity_type=args.activity_type or "",
                            failure_type=args.failure_type or "", pattern=args.pattern or "",
                            similar_to=args.similar_to or "", seen_after=args.seen_after or "",
                            seen_before=args.seen_before or "", most_frequent=args.most_frequent,
                            limit=args.limit)
    client = await client_for(args)
    handle = await client.start_workflow(
        LESSONS_QUERY_WORKFLOW, query, id=f"taskfleet-lessons-{uuid.uuid4().hex[:8]}",
        task_queue=args.task_queue, result_type=LessonsAnswer,
    )
    try:
        answer: LessonsAnswer = await served(client, handle.id, handle.result(),
                                             "the lessons query")
    except WorkflowFailureError as err:  # the worker refused the query (a bad date, a bad limit)
        print(f"taskfleet: lessons query refused: {root_cause_message(err)}", file=sys.stderr)
        return 2
    except NoWorkerServes:
        await handle.terminate(reason="taskfleet lessons: no worker polls this task queue")
        raise
    if args.json:
        print(json.dumps(asdict(answer) if query else asdict(answer.stats), indent=2))
        return 0
    s = answer.stats
    if query is None:
        print(f"{s.lessons} lessons from {s.path} ({s.lines_read} lines, "
              f"{s.malformed_lines} malformed"
              + (f", first at lines {s.malformed_line_numbers[:10]}"
                 if s.malformed_line_numbers else "")
              + f"), {s.task_types} task types, {s.tokens} distinct tokens, built in "
                f"{s.build_seconds:.3f}s")
        return 0
    if not answer.matches:
        print(f"no lessons match (the index holds {s.lessons}; `taskfleet lessons "
              "stats` describes it)")
        return 0
    for match in answer.matches:
        lesson = match.lesson
        score = f" score {match.score:.2f}" if match.score else ""
        print(f"{lesson.id}  [{lesson.task_type}/{lesson.activity_type} {lesson.failure_type}] "
              f"seen {lesson.times_seen}x, last {lesson.last_seen}{score}")
        print(f"""    {lesson.failure_msg.splitlines()[0][:120] if lesson.failure_msg
                     else lesson.pattern[:120]}""")
        if lesson.resolution:
            print(f"    resolved by: {lesson.resolution[:120]}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    ls = sub.add_parser("lessons", help="ask a worker's lessons index").add_subparsers(
        dest="lessons_command", required=True
    )
    q = ls.add_parser("query", help="lessons matching every given field, best first", **examples(
        "taskfleet lessons query --task-type lib --limit 5",
        "taskfleet lessons query --activity-type judge --most-frequent --json",
        "taskfleet lessons query --similar-to 'ImportError: cannot import name'"))
    for name, what in (("task-type", "the kind of task (a board's task_type)"),
                       ("activity-type", "the kind of step: implement, judge, plan, queue, ..."),
                       ("failure-type",
                        "verify_failed, exec_failed, timeout, conflict, flaky, ..."),
                       ("pattern", ("a failure message, matched exactly once numbers, hashes "
                                    "and temp paths are stripped")),
                       ("similar-to", "text the failure message resembles (ranked by BM25)"),
                       ("seen-after", "last seen at or after this ISO date or time"),
                       ("seen-before", "last seen before this ISO date or time")):
        q.add_argument(f"--{name}", help=what)
    q.add_argument("--most-frequent", action="store_true",
                   help="most seen first (default: most recent first)")
    q.add_argument("--limit", type=int, default=20, help="at most this many lessons (default 20)")
    q.add_argument("--json", action="store_true", help="print the matches as JSON")
    q.set_defaults(func=lessons)
    stats = ls.add_parser("stats", help="size of the index, malformed lines, build time",
                          **examples("taskfleet lessons stats", "taskfleet lessons stats --json"))
    stats.add_argument("--json", action="store_true", help="print the stats as JSON")
    stats.set_defaults(func=lessons)
