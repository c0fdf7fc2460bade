"""The prompt template cache: every template compiled once, at worker start, so a broken one stops
the start with its file and line. Undefined variables are errors. A board's inline templates are
untrusted: sandboxed, LRU-bounded, and rendered on a thread of their own with a time limit."""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import importlib.resources
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from taskfleet.core.errors import StartupError

# The shipped templates, as package data (setuptools installs packages unzipped).
DEFAULT_TEMPLATES_DIR = Path(str(importlib.resources.files("taskfleet") / "prompts"))
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".txt", ".md")
# How long an inline template may render; a real prompt renders in microseconds.
RENDER_LIMIT_SECONDS = 5.0


class TemplateLoadError(StartupError):
    """A template in the templates directory does not compile: file and line are in the message."""


class TemplateRenderError(ValueError):
    """A render failed (missing variable, unknown template); the message names both."""


class _RenderTimedOut(BaseException):
    """Raised in a render thread past its limit (BaseException: templates can't catch it)."""


def is_template_name(template: str) -> bool:
    """A board's `template` names a file in the templates directory, or is inline template text."""
    return template.endswith(TEMPLATE_SUFFIXES) and "{" not in template


@dataclass
class TemplateStats:
    name: str
    content_hash: str
    renders: int = 0
    render_seconds: float = 0.0


@dataclass
class Rendered:
    text: str
    template: str
    content_hash: str


@dataclass
class _Compiled:
    template: jinja2.Template
    stats: TemplateStats
    lock: threading.Lock = field(default_factory=threading.Lock)


def _hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


class TemplateCache:
    def __init__(self, templates_dir: Path | str | None = None, inline_capacity: int = 256) -> None:
        self.templates_dir = Path(templates_dir) if templates_dir else DEFAULT_TEMPLATES_DIR
        self.inline_capacity = inline_capacity
        options: dict[str, Any] = dict(
            undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
        )
        self._env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(self.templates_dir)),
                                       **options)
        self._sandbox = SandboxedEnvironment(**options)
        self._compiled: dict[str, _Compiled] = {}
        self._inline: OrderedDict[str, _Compiled] = OrderedDict()
        self._inline_lock = threading.Lock()

    def load(self) -> list[str]:
        """Compile every template in the directory; `TemplateLoadError` on the first bad one."""
        if not self.templates_dir.is_dir():
            raise TemplateLoadError(f"templates directory {self.templates_dir} does not exist")
        compiled: dict[str, _Compiled] = {}
        for path in sorted(self.templates_dir.rglob("*")):
            if not path.is_file() or path.suffix not in TEMPLATE_SUFFIXES:
                continue
            name = path.relative_to(self.templates_dir).as_posix()
            source = path.read_text()
            try:
                template = self._env.get_template(name)
            except jinja2.TemplateSyntaxError as err:
                raise TemplateLoadError(f"template {path}:{err.lineno}: {err.message}") from None
            compiled[name] = _Compiled(template, TemplateStats(name, _hash(source)))
        self._compiled = compiled
        return sorted(compiled)

    def names(self) -> list[str]:
        return sorted(self._compiled)

    def content_hash(self, name: str) -> str:
        return self._lookup(name).stats.content_hash

    def render(self, name: str, context: dict[str, Any]) -> Rendered:
        """Render a compiled template: microseconds, no parsing."""
        return self._render(self._lookup(name), context)

    def render_inline(self, source: str, context: dict[str, Any]) -> Rendered:
        """Render template text from a board, sandboxed; compiled forms are kept in an LRU."""
        key = _hash(source)
        with self._inline_lock:
            entry = self._inline.get(key)
            if entry is not None:
                self._inline.move_to_end(key)
        if entry is None:
            try:
                template = self._sandbox.from_string(source)
            except jinja2.TemplateSyntaxError as err:
                raise TemplateRenderError(
                    f"inline template, line {err.lineno}: {err.message}") from None
            entry = _Compiled(template, TemplateStats(f"inline:{key}", key))
            with self._inline_lock:
                self._inline[key] = entry
                while len(self._inline) > self.inline_capacity:
                    self._inline.popitem(last=False)
        return self._render(entry, context)

    async def render_with_limit(
        self, template: str, context: dict[str, Any], limit_seconds: float = RENDER_LIMIT_SECONDS
    ) -> Rendered:
        """Render a named template (compiled at start) on the loop, or a board's inline text on a
        thread of its own, stopped after `limit_seconds` with `TemplateRenderError`."""
        if is_template_name(template):
            return self.render(template, context)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Rendered] = loop.create_future()

        def settle(outcome: Rendered | BaseException) -> None:
            if done.done():
                return
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

        def render() -> None:
            try:
                try:
                    outcome: Rendered | BaseException = self.render_inline(template, context)
                except Exception as err:  # handed to the awaiting task, raised there
                    outcome = err
                loop.call_soon_threadsafe(settle, outcome)
            except _RenderTimedOut:  # stopped at the limit (possibly just as it finished)
                pass
            except RuntimeError:  # the loop closed meanwhile: nobody waits
                pass

        thread = threading.Thread(target=render, name="taskfleet-template-render", daemon=True)
        thread.start()
        try:
            return await asyncio.wait_for(asyncio.shield(done), limit_seconds)
        except asyncio.TimeoutError:
            _interrupt(thread)
            raise TemplateRenderError(
                f"inline template took longer than {limit_seconds:g}s to render (stopped)"
            ) from None
        except asyncio.CancelledError:
            _interrupt(thread)
            raise

    def _lookup(self, name: str) -> _Compiled:
        entry = self._compiled.get(name)
        if entry is None:
            raise TemplateRenderError(f"no template {name!r} in {self.templates_dir} (have: "
                                      f"{', '.join(self.names()) or 'none'})")
        return entry

    @staticmethod
    def _render(entry: _Compiled, context: dict[str, Any]) -> Rendered:
        started = time.perf_counter()
        try:
            text = entry.template.render(context)
        except jinja2.UndefinedError as err:
            raise TemplateRenderError(f"template {entry.stats.name}: {err.message}") from None
        except jinja2.exceptions.SecurityError as err:
            raise TemplateRenderError(
                f"template {entry.stats.name}: refused by the sandbox: {err}") from None
        with entry.lock:
            entry.stats.renders += 1
            entry.stats.render_seconds += time.perf_counter() - started
        return Rendered(text, entry.stats.name, entry.stats.content_hash)

    def stats(self) -> list[TemplateStats]:
        out = [TemplateStats(**vars(e.stats)) for e in self._compiled.values()]
        with self._inline_lock:
            out.extend(TemplateStats(**vars(e.stats)) for e in self._inline.values())
        return out


def _interrupt(thread: threading.Thread) -> None:
    """Stop a render thread at its next bytecode (templates compile to Python); a single long C call
    (a huge string repeat) still runs to its end."""
    if thread.is_alive() and thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(_RenderTimedOut))
