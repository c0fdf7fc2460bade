"""Applying a model's edits: each refusal on real files in a temp folder, and the accepted cases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskfleet.activities.model_io.llm_edits import EditRefused, apply_edits


@pytest.fixture
def root(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    (wt / ".git").mkdir(parents=True)
    (wt / ".git" / "config").write_text("[core]\n")
    (wt / "src").mkdir()
    (wt / "src" / "a.py").write_text("def f():\n    return 1   \n\nx = 1\nx = 1\n")
    return wt


def edit(path: str, old: str = "", new: str = "new\n") -> list[dict]:
    return [{"path": path, "old_text": old, "new_text": new}]


def refused(root: Path, edits: list[dict], words: str) -> None:
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(EditRefused, match=words):
        apply_edits(root, edits)
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before  # nothing written (single-edit refusals touch no file)


def test_replaces_exactly_one_occurrence(root: Path) -> None:
    assert apply_edits(root, edit("src/a.py", "return 1   \n", "return 2\n")) == ["src/a.py"]
    assert "return 2\n" in (root / "src" / "a.py").read_text()


def test_trailing_whitespace_fallback_still_needs_one_match(root: Path) -> None:
    apply_edits(root, edit("src/a.py", "def f():\n    return 1\n", "def f():\n    return 3\n"))
    assert (root / "src" / "a.py").read_text().startswith("def f():\n    return 3\n\nx = 1")


def test_creates_a_new_file_and_its_folders(root: Path) -> None:
    apply_edits(root, edit("pkg/new/mod.py", "", "VALUE = 1\n"))
    assert (root / "pkg" / "new" / "mod.py").read_text() == "VALUE = 1\n"


def test_refuses_no_match(root: Path) -> None:
    refused(root, edit("src/a.py", "return 42", "x"), "not found")


def test_refuses_two_matches(root: Path) -> None:
    refused(root, edit("src/a.py", "x = 1\n", "x = 2\n"), "occurs 2 times")


def test_refuses_dot_dot(root: Path) -> None:
    refused(root, edit("../x"), r"must not contain '\.\.'")
    assert not (root.parent / "x").exists()


def test_refuses_git_config(root: Path) -> None:
    refused(root, edit(".git/config", "[core]\n", "[core]\n\thooksPath = /tmp\n"), "under .git")


def test_refuses_absolute_path(root: Path, tmp_path: Path) -> None:
    refused(root, edit(str(tmp_path / "abs.txt")), "not absolute")
    assert not (tmp_path / "abs.txt").exists()


def test_refuses_symlink_escape(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    refused(root, edit("link/evil.txt"), "outside the worktree")
    assert list(outside.iterdir()) == []


def test_refuses_create_over_existing_content(root: Path) -> None:
    refused(root, edit("src/a.py", "", "replaced\n"), "exists with content")


def test_refuses_malformed_edits(root: Path) -> None:
    refused(root, [], "non-empty list")
    refused(root, [{"path": "a", "new_text": 3}], "must be strings")
