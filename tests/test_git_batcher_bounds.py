"""What the batcher keeps about refused input stays small and cheap, whatever the input."""

from __future__ import annotations

import json

import pytest

from taskfleet.core.bounded import describe_args, preview
from taskfleet.core.git_op_validation import InvalidGitOp, parse_git_op


def deep(depth: int) -> object:
    value: object = {"op_type": "push"}
    for _ in range(depth):
        value = [value, {"k": value}] if depth < 10 else [value]
    return value


HOSTILE = {
    "huge string": "x" * (1536 * 1024),
    "huge op": {"op_type": "push", "branch": "b", "message": "m" * (1536 * 1024)},
    "deep 600": deep(600),
    "deep 100000": deep(100_000),  # deeper than any recursive walk could go
    "wide object": {f"k{i}": i for i in range(100_000)},
    "wide list": list(range(100_000)),
    "many long keys": {"k" * 10_000 + str(i): "v" * 10_000 for i in range(50)},
    "huge int": 10**4000,
    "bytes": b"\x00" * 1000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_preview_is_a_few_hundred_bytes(name: str):
    kept = preview(HOSTILE[name])
    assert len(json.dumps(kept, ensure_ascii=False)) <= 700, name


def test_small_values_are_kept_as_sent():
    op = {"op_type": "push", "branch": "x", "files": ["a", "b"]}
    assert preview(op) == op
    assert describe_args(()) is None
    assert describe_args((op, 1)) == [op, 1]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_validation_refuses_hostile_ops_with_a_short_reason(name: str):
    with pytest.raises(InvalidGitOp) as caught:
        parse_git_op(HOSTILE[name])
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize(
    "field,value",
    [("id", "i" * 201), ("branch", "b" * 300), ("reply_to", "r" * 1001),
     ("worktree", "/" + "w" * 5000), ("message", "m" * (65 * 1024)), ("expect_commit", "a" * 39),
     ("expect_commit", "A" * 40)],
)
def test_long_or_malformed_fields_are_refused(field: str, value: str):
    op = {"op_type": "push", "branch": "ok", field: value}
    with pytest.raises(InvalidGitOp) as caught:
        parse_git_op(op)
    assert field.split("_")[0] in str(caught.value) or "branch name" in str(caught.value)
    assert len(str(caught.value)) < 400


def test_an_op_over_64_kib_is_refused_even_with_each_field_in_bounds():
    op = {"op_type": "commit", "branch": "ok", "worktree": "/w", "message": "m" * 60_000,
          "files": [f"dir/{i:05d}-{'f' * 40}.txt" for i in range(1000)]}
    with pytest.raises(InvalidGitOp, match="KiB as JSON"):
        parse_git_op(op)
