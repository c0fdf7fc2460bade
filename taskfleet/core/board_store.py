"""Boards by reference: a git tree in the clone (`board.json`, then `pages/*.jsonl` of rows as
written, with their lines) kept by `refs/taskfleet/boards/<id>`. A page is one blob (TOML cannot
be parsed from the middle); a bad row fails alone, naming its line. Stored twice, a board keeps
its id."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from taskfleet.core.boards import BoardError, BoardHead, RawTask, task_from_row
from taskfleet.core.git_objects import (
    GitStoreError,
    ObjectReader,
    keep,
    object_reader,
    write_blob,
    write_tree,
)
from taskfleet.core.models.board_store import (
    REASON_MAX_CHARS,
    TASK_MAX_BYTES,
    BoardPage,
    BoardPageRequest,
    BoardReference,
    RefusedTask,
)
from taskfleet.core.store_refs import board_ref
from taskfleet.core.task_env import env_name_problem

FORMAT_VERSION = 1
STORE_PAGE_ROWS = 500  # rows per stored page blob
STORE_PAGE_BYTES = 256 * 1024  # or fewer, when rows are big
# Distinct `env` names a reference lists (each task is checked again as it runs).
ENV_NAMES_MAX = 256


class BoardStoreError(RuntimeError):
    """A stored board cannot be read (missing clone, unknown id, damaged store): one clear line."""


def _page_name(first_row: int) -> str:
    return f"pages/{first_row:09d}.jsonl"


def _row_line(raw: RawTask) -> str:
    """A page row: `{"n", "line", "row"}`, or `{"n", "line", "id", "error"}` if unreadable."""
    data: dict[str, Any] = {"n": raw.number, "line": raw.line}
    if raw.error:
        data.update(id=raw.id, error=raw.error)
    else:
        data["row"] = raw.row
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _row_of(text: str | bytes) -> RawTask:
    data = json.loads(text)
    return RawTask(number=data["n"], line=data["line"], row=data.get("row"),
                   error=data.get("error", ""),
                   id=data.get("id", "") or str((data.get("row") or {}).get("id", "")))


def write_board(repo: str | Path, head: BoardHead, rows: Iterable[RawTask], source: str = "",
                first_page: tuple[int, int] = (0, 0)) -> tuple[BoardReference, BoardPage | None]:
    """The one way a board is stored: rows written a page at a time; its reference, and with
    `first_page` the first page as a worker loads it. A board-wide BoardError stops it."""
    entries: list[tuple[str, str]] = []
    pages: list[list[int]] = []
    page: list[bytes] = []
    kept: list[RawTask] = []
    page_bytes = total = done = 0
    env = _EnvNames(head.settings.get("env"))

    def flush() -> None:
        nonlocal page, page_bytes
        if page:
            first = total - len(page)
            entries.append((_page_name(first).split("/", 1)[1], write_blob(repo, b"".join(page))))
            pages.append([first, len(page)])
            page, page_bytes = [], 0

    for item in rows:
        text = _row_line(item)
        line = (text + "\n").encode()
        if page and (len(page) >= STORE_PAGE_ROWS or page_bytes + len(line) > STORE_PAGE_BYTES):
            flush()
        page.append(line)
        page_bytes += len(line)
        total += 1
        if len(kept) < first_page[0]:
            kept.append(_row_of(text))
        done += bool(item.row and item.row.get("done") is True)
        if item.row and item.row.get("done") is not True:
            env.add(item.row.get("env"))
    flush()
    if not total:
        raise BoardError(f"{source or head.name}: the board has no tasks")
    manifest = {
        "version": FORMAT_VERSION, "name": head.name, "format": head.format, "rows": head.rows,
        "source": source, "settings": head.settings, "tasks": total, "open": total - done,
        "pages": pages,
    }
    manifest_blob = write_blob(repo, json.dumps(manifest, sort_keys=True).encode())
    tree = write_tree(repo, [("board.json", manifest_blob)], [("pages", write_tree(repo, entries))])
    keep(repo, board_ref(tree), tree)
    reference = BoardReference(board_id=tree, tasks=total, open_tasks=total - done, name=head.name,
                               format=head.format, source=source, env=env.names())
    if not first_page[0]:
        return reference, None
    stored = replace(head, settings=json.loads(json.dumps(head.settings)))
    request = BoardPageRequest(repo=str(repo), board_id=tree, start=0, max_tasks=first_page[0],
                               max_bytes=first_page[1])
    return reference, page_of(enumerate(kept), stored, source or head.name, total, request)


class _EnvNames:
    """The worker variables a board's open tasks ask for, so a worker can refuse it before anything
    starts (rows with a malformed `env` fail alone when loaded)."""

    def __init__(self, board_wide: Any) -> None:
        self.seen: set[str] = set()
        self.add(board_wide)

    def add(self, value: Any) -> None:
        if isinstance(value, list) and len(self.seen) < ENV_NAMES_MAX:
            self.seen.update(v for v in value if isinstance(v, str) and not env_name_problem(v))

    def names(self) -> list[str]:
        return sorted(self.seen)[:ENV_NAMES_MAX]


class BoardReader:
    """Reads one stored board's pages; the manifest is read once (a board never changes)."""

    def __init__(self, repo: str | Path, board_id: str, objects: ObjectReader) -> None:
        self.repo, self.board_id, self.objects = str(repo), board_id, objects
        data = self._read("board.json")
        try:
            manifest = json.loads(data)
        except ValueError:
            message = f"board {board_id} in {repo}: its board.json is not JSON"
            raise BoardStoreError(message) from None
        if manifest.get("version") != FORMAT_VERSION:
            raise BoardStoreError(
                f"board {board_id} in {repo}: format version {manifest.get('version')!r}; "
                f"this worker reads {FORMAT_VERSION}"
            )
        self.manifest: dict[str, Any] = manifest
        self.head = BoardHead(format=manifest["format"], name=manifest["name"],
                              settings=manifest["settings"], rows=manifest["rows"])
        self.source = manifest.get("source") or manifest["name"]
        self.total: int = manifest["tasks"]

    def _read(self, path: str) -> bytes:
        try:
            data = self.objects.read(f"{self.board_id}:{path}")
        except GitStoreError as err:
            raise BoardStoreError(str(err)) from None
        if data is None:
            raise BoardStoreError(
                f"no stored board {self.board_id} in {self.repo} (missing {path})")
        return data

    def rows(self, start: int) -> Iterable[tuple[int, RawTask]]:
        """Rows from index `start` to the end, a page blob at a time."""
        for first, count in self.manifest["pages"]:
            if first + count <= start:
                continue
            lines = self._read(_page_name(first)).splitlines()
            for offset in range(max(start - first, 0), count):
                yield first + offset, _row_of(lines[offset])

    def page(self, request: BoardPageRequest) -> BoardPage:
        """Rows from `request.start`, validated one by one, up to `max_tasks` or `max_bytes`."""
        return page_of(self.rows(request.start), self.head, self.source, self.total, request)


def page_of(rows: Iterable[tuple[int, RawTask]], head: BoardHead, source: str, total: int,
            request: BoardPageRequest) -> BoardPage:
    """A page of (index, raw row) from `request.start`, each validated alone, up to `max_tasks` or
    `max_bytes`: what a worker loads, or a client hands the run as its first page."""
    page = BoardPage(start=request.start, next=request.start, total=total,
                     board_id=request.board_id)
    used = 0
    for index, raw in rows:
        if index < request.start:
            continue
        if index - request.start >= request.max_tasks:
            break
        item: Any
        try:
            spec = task_from_row(raw, head, source)
            size = len(json.dumps(vars(spec)))  # flat: cheaper than asdict
            if size > TASK_MAX_BYTES:
                raise BoardError(
                    f"{source}{raw.where}: task {spec.id} is {size // 1024} KB as JSON; a task "
                    f"may be at most {TASK_MAX_BYTES // 1024} KB (put long templates in the "
                    "templates folder)"
                )
            item = None if spec.done else spec
        except BoardError as err:
            reason = str(err)
            if len(reason) > REASON_MAX_CHARS:
                reason = reason[: REASON_MAX_CHARS - 3] + "..."
            item = RefusedTask(index=index, id=raw.id or f"row-{raw.number}", line=raw.line,
                               reason=reason)
            size = len(json.dumps(vars(item)))
        if page.next > request.start and used + size > request.max_bytes:
            break
        used += size
        if item is None:
            page.done += 1
        elif isinstance(item, RefusedTask):
            page.refused.append(item)
        else:
            page.tasks.append(item)
            page.rows.append(index)
        page.next = index + 1
    return page


def read_page(request: BoardPageRequest) -> BoardPage:
    """One page of a stored board (what the `taskfleet_load_board_page` activity returns)."""
    with object_reader(request.repo) as objects:
        return BoardReader(request.repo, request.board_id, objects).page(request)
