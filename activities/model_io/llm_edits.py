"""Apply a model's `apply_edits` input to a worktree, refusing anything that is not plainly safe.
Git, not the model, makes the diff; every refusal names the edit and why, in words a person (or the
model in its fix round) can act on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MAX_EDITS = 500


class EditRefused(ValueError):
    """An edit cannot be applied; the message names the edit and the reason."""


@dataclass
class Edit:
    path: str
    old_text: str
    new_text: str


def parse_edits(raw: Any) -> list[Edit]:
    """The `edits` array of the tool input, checked for shape."""
    if not isinstance(raw, list) or not raw:
        raise EditRefused("`edits` must be a non-empty list of {path, old_text, new_text}")
    if len(raw) > MAX_EDITS:
        raise EditRefused(f"{len(raw)} edits; at most {MAX_EDITS} per attempt")
    edits = []
    for number, item in enumerate(raw, 1):
        if not isinstance(item, dict):
            raise EditRefused(f"edit #{number} must be an object with path, old_text, new_text")
        values = [item.get(k, "" if k == "old_text" else None)
                  for k in ("path", "old_text", "new_text")]
        if not all(isinstance(v, str) for v in values):
            raise EditRefused(f"edit #{number}: path, old_text and new_text must be strings")
        edits.append(Edit(*values))
    return edits


def _target(root: Path, path: str, number: int) -> Path:
    where = f"edit #{number} ({path!r})"
    if not path or "\0" in path:
        raise EditRefused(f"{where}: path must be a non-empty relative path")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("\\") or (len(path) > 1 and path[1] == ":"):
        raise EditRefused(f"{where}: path must be relative to the repository root, not absolute")
    if ".." in pure.parts:
        raise EditRefused(f"{where}: path must not contain '..'")
    if any(part.lower() == ".git" for part in pure.parts):
        raise EditRefused(f"{where}: files under .git cannot be edited")
    real_root = Path(os.path.realpath(root))
    target = root.joinpath(*pure.parts)
    real = Path(os.path.realpath(target))
    if real != real_root and real_root not in real.parents:
        raise EditRefused(f"{where}: resolves outside the worktree (through a symlink) to {real}")
    if any(part.lower() == ".git" for part in real.relative_to(real_root).parts):
        raise EditRefused(f"{where}: resolves into .git (through a symlink)")
    return target


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    count = text.count(old)
    if count == 1:
        return text.replace(old, new, 1)
    if count > 1:
        raise EditRefused(
            f"{where}: old_text occurs {count} times; include more context so it occurs once")
    # Fallback: the same lines with trailing whitespace ignored (models often drop or add it).
    lines = text.splitlines(keepends=True)
    wanted = [line.rstrip() for line in old.splitlines()]
    while wanted and not wanted[-1]:
        wanted.pop()
    if wanted:
        stripped = [line.rstrip() for line in lines]
        starts = [i for i in range(len(lines) - len(wanted) + 1)
                  if stripped[i : i + len(wanted)] == wanted]
        if len(starts) == 1:
            start, end = starts[0], starts[0] + len(wanted)
            replacement = new
            if lines[end - 1].endswith("\n") and not new.endswith("\n"):
                replacement += "\n"
            return "".join(lines[:start]) + replacement + "".join(lines[end:])
        if len(starts) > 1:
            raise EditRefused(
                f"{where}: old_text occurs {len(starts)} times (ignoring trailing whitespace); "
                "include more context so it occurs once")
    raise EditRefused(
        f"{where}: old_text was not found (not even ignoring trailing whitespace per line)")


def apply_edits(root: Path, raw_edits: Any) -> list[str]:
    """Apply every edit in order under `root`; returns the paths touched. Raises EditRefused."""
    touched = []
    for number, edit in enumerate(parse_edits(raw_edits), 1):
        target = _target(root, edit.path, number)
        where = f"edit #{number} ({edit.path})"
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise EditRefused(f"{where}: is not a regular file")
        if edit.old_text == "":
            if target.exists() and target.stat().st_size > 0:
                raise EditRefused(
                    f"{where}: old_text is empty (create) but the file exists with content")
            target.parent.mkdir(parents=True, exist_ok=True)
            _target(root, edit.path, number)  # the folders just made must not lead outside either
            target.write_text(edit.new_text)
        else:
            if not target.exists():
                raise EditRefused(
                    f"{where}: file does not exist (use an empty old_text to create it)")
            try:
                text = target.read_text()
            except UnicodeDecodeError:
                raise EditRefused(f"{where}: not a UTF-8 text file") from None
            target.write_text(_replace_once(text, edit.old_text, edit.new_text, where))
        touched.append(edit.path)
    return touched
