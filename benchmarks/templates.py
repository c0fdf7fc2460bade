"""The default implementer template with 20 lessons: rendered from the cache vs parsed and
rendered every time, side by side in one run. Prints JSON."""

from __future__ import annotations

import argparse
import time

import jinja2
from common import emit

from taskfleet.activities.services.template_cache import DEFAULT_TEMPLATES_DIR, TemplateCache


def context() -> dict:
    lessons = [{"failure_type": "verify_failed", "times_seen": i + 1,
                "failure_msg": f"test_{i} failed: expected {i}", "resolution": f"handle case {i}"}
               for i in range(20)]
    task = {"id": "T2.3", "scope": "Prompt template caching", "branch": "task/T2.3",
            "verify": "pytest -q tests/test_templates.py", "task_type": "feature"}
    return {"task": task, "board": {"base": "main"}, "lessons": lessons}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--renders", type=int, default=2_000)
    parser.add_argument("--quick", action="store_true", help="200 renders each")
    args = parser.parse_args()
    if args.quick:
        args.renders = 200
    ctx = context()
    cache = TemplateCache()
    cache.load()
    source = (DEFAULT_TEMPLATES_DIR / "implementer.j2").read_text()

    started = time.perf_counter()
    for _ in range(args.renders):
        cached_text = cache.render("implementer.j2", ctx).text
    cached = (time.perf_counter() - started) / args.renders

    started = time.perf_counter()
    for _ in range(args.renders):
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        fresh_text = env.from_string(source).render(ctx)
    fresh = (time.perf_counter() - started) / args.renders

    assert cached_text == fresh_text
    emit({
        "quick": args.quick,
        "template": "implementer.j2",
        "lessons": 20,
        "renders": args.renders,
        "cached_render_us": round(cached * 1e6, 1),
        "parse_and_render_us": round(fresh * 1e6, 1),
        "speedup": round(fresh / cached, 1),
    })


if __name__ == "__main__":
    main()
