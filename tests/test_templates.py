"""Prompt templates: compiled at worker start, strict about variables, sandboxed when inline."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from temporalio.worker import Worker

from taskfleet.activities.services.template_cache import (
    TemplateCache,
    TemplateLoadError,
    TemplateRenderError,
)
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import ROOT, python_cmd

CONTEXT = {
    "task": {"id": "T1", "scope": "do it", "branch": "task/T1", "verify": "make check",
             "task_type": "feature"},
    "board": {"base": "main"},
    "lessons": [{"failure_type": "timeout", "times_seen": 2, "failure_msg": "slow",
                 "resolution": "faster"}],
}


def broken_templates(tmp_path: Path) -> Path:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "fine.j2").write_text("hello {{ name }}\n")
    (folder / "broken.j2").write_text("line one\nline two\n{% for x in items %}\nno endfor\n")
    return folder


def test_default_templates_compile_and_render():
    cache = TemplateCache()
    assert {"implementer.j2", "planner.j2", "judge.j2"} <= set(cache.load())
    rendered = cache.render("implementer.j2", CONTEXT)
    assert "task T1: do it" in rendered.text and "resolved by: faster" in rendered.text
    assert (rendered.content_hash == cache.content_hash("implementer.j2")
            and len(rendered.content_hash) == 16)
    stats = {s.name: s for s in cache.stats()}
    assert stats["implementer.j2"].renders == 1


def test_syntax_error_names_file_and_line(tmp_path: Path):
    with pytest.raises(TemplateLoadError) as caught:
        TemplateCache(broken_templates(tmp_path)).load()
    assert "broken.j2:" in str(caught.value)
    assert "endfor" in str(caught.value) or "end of template" in str(caught.value)


def test_missing_variable_is_a_clear_error():
    cache = TemplateCache()
    cache.load()
    with pytest.raises(TemplateRenderError) as caught:
        cache.render("implementer.j2",
                     {"task": {"id": "T1"}, "board": {"base": "main"}, "lessons": []})
    assert "implementer.j2" in str(caught.value) and "scope" in str(caught.value)


def test_inline_templates_are_sandboxed_and_bounded():
    cache = TemplateCache(inline_capacity=2)
    cache.load()
    assert cache.render_inline("do {{ task.id }}", CONTEXT).text == "do T1"
    with pytest.raises(TemplateRenderError) as caught:
        cache.render_inline("{{ ''.__class__.__mro__[1].__subclasses__() }}", CONTEXT)
    assert "sandbox" in str(caught.value) or "unsafe" in str(caught.value)
    for i in range(5):
        cache.render_inline(f"n{i} {{{{ task.id }}}}", CONTEXT)
    assert sum(1 for s in cache.stats() if s.name.startswith("inline:")) == 2


async def test_broken_template_stops_plugin_worker_start(client, task_queue, tmp_path: Path):
    settings = TaskfleetSettings(state_dir=tmp_path / "state",
                                 templates_dir=broken_templates(tmp_path))
    worker = Worker(client, task_queue=task_queue, plugins=[TaskfleetPlugin(settings)])
    with pytest.raises(TemplateLoadError) as caught:
        await asyncio.wait_for(worker.run(), 30)
    assert "broken.j2:" in str(caught.value)


def test_broken_template_stops_worker_py_with_one_line(server_address: str, tmp_path: Path):
    proc = subprocess.run(
        python_cmd(str(ROOT / "worker.py"), "--address", server_address, "--state-dir",
                   str(tmp_path / "s")),
        cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "TASKFLEET_TEMPLATES_DIR": str(broken_templates(tmp_path))},
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("taskfleet worker:")]
    assert len(errors) == 1 and "broken.j2:" in errors[0], proc.stderr


async def test_inline_template_with_a_huge_loop_is_stopped_off_the_event_loop():
    """A board's inline template that loops for ages renders on its own thread;
    the event loop keeps running meanwhile, and the render is stopped at the limit
    with a clear error."""
    import threading
    import time

    from tests.conftest import eventually

    cache = TemplateCache()
    cache.load()
    source = ("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}"
              "{{ task.id }}")
    ticks: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(ticker())
    with pytest.raises(TemplateRenderError) as caught:
        await cache.render_with_limit(source, CONTEXT, limit_seconds=1.0)
    stop.set()
    await beat
    assert "inline template took longer than 1s" in str(caught.value)
    # The loop ran throughout the second the render took: ticks never stopped for long.
    assert len(ticks) > 10
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < 0.5

    async def render_thread_gone() -> None:
        assert not [t for t in threading.enumerate() if t.name == "taskfleet-template-render"]

    await eventually(render_thread_gone, timeout=10)
    # Ordinary inline and named templates still render through the same call.
    assert (await cache.render_with_limit("hi {{ task.id }}", CONTEXT)).text == "hi T1"
    assert "task T1: do it" in (await cache.render_with_limit("implementer.j2", CONTEXT)).text
    with pytest.raises(TemplateRenderError):
        await cache.render_with_limit("{{ nope }}", CONTEXT)
