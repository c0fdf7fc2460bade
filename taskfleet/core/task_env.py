"""What a task's processes may see of the worker's environment, decided here alone: boards come from
people other than the operator, so a task never inherits the worker's credentials. A minimal
base, the task's `TASKFLEET_*`, and worker variables allowed by `TASKFLEET_TASK_ENV`; a board's
`env` can never widen that list. Pure: the environment is passed in."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ALLOW_VARIABLE = "TASKFLEET_TASK_ENV"
# Always given, when the worker has them: what any program needs to run, format text and commit.
BASE_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "EMAIL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
})
BASE_PREFIXES = ("LC_",)
TASK_PREFIX = "TASKFLEET_"
_GIT_CONFIG = re.compile(r"GIT_CONFIG_(?:KEY|VALUE)_(\d+)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!]+")
MAX_NAMES = 64  # names one board (or one task) may ask for


class TaskEnvError(ValueError):
    """An allow-list or a board's `env` that cannot be used as written; one line naming it."""


def env_name_problem(name: object) -> str | None:
    """Why `name` cannot be a variable a board asks for, or None."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"{str(name)[:60]!r} is not an environment variable name (letters, digits, '_')"
    return None


def env_names_problem(value: object) -> str | None:
    """Why a board's `env` value is not a list of at most MAX_NAMES variable names, or None."""
    if not isinstance(value, list):
        return "'env' must be a list of environment variable names"
    if len(value) > MAX_NAMES:
        return f"'env' names {len(value)} variables, at most {MAX_NAMES}"
    for name in value:
        problem = env_name_problem(name)
        if problem:
            return f"'env': {problem}"
    return None


def parse_allow_list(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """`NPM_TOKEN, PIP_*` (commas or spaces) or a list -> the names and patterns, in order."""
    if text is None:
        return ()
    items = (text.replace(",", " ").split() if isinstance(text, str)
             else [str(t).strip() for t in text])
    out: list[str] = []
    for item in items:
        if not item:
            continue
        if not _PATTERN.fullmatch(item):
            raise TaskEnvError(f"{ALLOW_VARIABLE}: {item[:60]!r} is not a variable name or pattern "
                               "(letters, digits, '_', '*', '?', '[]')")
        if item not in out:
            out.append(item)
    return tuple(out)


def _is_base(name: str) -> bool:
    return name in BASE_NAMES or name.startswith(BASE_PREFIXES)


@dataclass(frozen=True)
class TaskEnvironment:
    """The rules of one worker: its allow-list, applied to its environment (`worker`)."""

    allow: tuple[str, ...] = ()
    worker: Mapping[str, str] = field(default_factory=lambda: os.environ, compare=False, repr=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> TaskEnvironment:
        environ = os.environ if environ is None else environ
        return cls(parse_allow_list(environ.get(ALLOW_VARIABLE, "")), environ)

    def allowed(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.allow)

    def given(self, name: str) -> bool:
        """Whether a worker variable of this name reaches tasks."""
        return _is_base(name) or self.allowed(name)

    def refused(self, names: Iterable[str]) -> list[str]:
        """Names a board asks for that the operator did not allow (base names are always fine)."""
        return sorted({n for n in names if not self.given(n)})

    def missing(self, names: Iterable[str]) -> list[str]:
        """Allowed names the worker's environment does not have."""
        return sorted({n for n in names if self.given(n) and n not in self.worker})

    def build(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """A task process's environment from its `env`: a value equal to the worker's own is kept
        only if allowed (`GIT_CONFIG_*` pairs likewise, renumbered)."""
        worker = self.worker
        out = {name: value for name, value in worker.items() if self.given(name)
               and not _GIT_CONFIG.fullmatch(name) and name != "GIT_CONFIG_COUNT"}
        pairs: dict[int, list[str | None]] = {}
        for name, value in (env or {}).items():
            matched = _GIT_CONFIG.fullmatch(name)
            if matched:
                pairs.setdefault(int(matched.group(1)), [None, None])["VALUE" in name] = value
                continue
            if name == "GIT_CONFIG_COUNT":
                continue
            inherited = worker.get(name) == value and not name.startswith(TASK_PREFIX)
            if inherited and not self.given(name):
                continue
            out[name] = value
        kept = [
            (key, value) for index, (key, value) in sorted(pairs.items())
            if key is not None and value is not None and not self._inherited_pair(index, key, value)
        ]
        for index, (key, value) in enumerate(kept):
            out[f"GIT_CONFIG_KEY_{index}"], out[f"GIT_CONFIG_VALUE_{index}"] = key, value
        if kept:
            out["GIT_CONFIG_COUNT"] = str(len(kept))
        return out

    def _inherited_pair(self, index: int, key: str, value: str) -> bool:
        """A git config pair the worker itself carries (it may hold a credential)."""
        worker = self.worker
        same = (worker.get(f"GIT_CONFIG_KEY_{index}") == key
                and worker.get(f"GIT_CONFIG_VALUE_{index}") == value)
        return same and not self.allowed(f"GIT_CONFIG_VALUE_{index}")

    def describe(self) -> str:
        """For the worker's start line: names only, never a value."""
        allow = ", ".join(self.allow) if self.allow else "nothing more"
        return ("tasks see PATH, HOME, locale, TZ, git identity, their TASKFLEET_* variables, and "
                f"{ALLOW_VARIABLE}: {allow}")
