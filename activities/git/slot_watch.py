"""Which paths of a slot a task's commands touched, from the kernel (inotify), not a tree scan (`git
status` walks every file: seconds on a large tree). One watch per directory for the slot's life;
answers None ("unknown": the caller scans) on queue overflow, the watch limit, a renamed
directory or a read failure. `TASKFLEET_SLOT_WATCH=0` turns it off."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from pathlib import Path

IN_ACCESS = 0x00000001
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
         | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

_libc = None


def _c():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        _libc = libc
    return _libc


def enabled() -> bool:
    return os.environ.get("TASKFLEET_SLOT_WATCH", "1") != "0"


class WatchFailed(Exception):
    """The slot cannot be watched (no inotify, the watch limit): its changes are found by a scan."""


class SlotWatch:
    """The paths touched under `root` since the last `take()`; None when that cannot be known."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.abspath(root)
        try:
            self._fd = _c().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except (OSError, AttributeError) as err:
            raise WatchFailed(f"inotify: {err}") from None
        if self._fd < 0:
            raise WatchFailed(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory relative to root
        self._touched: set[str] = set()
        self._lost = False
        try:
            self._watch_tree("")
        except WatchFailed:
            self.close()
            raise

    def _watch(self, rel: str) -> bool:
        path = os.path.join(self.root, rel) if rel else self.root
        wd = _c().inotify_add_watch(self._fd, path.encode(), _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):
                return False  # gone already (its deletion is an event of its parent)
            raise WatchFailed(f"inotify_add_watch {path}: {os.strerror(err)}")
        self._dirs[wd] = rel
        return True

    def _watch_tree(self, rel: str, note: bool = False) -> None:
        """Watch `rel` and every directory under it; with `note`, every path under it is touched
        (made after the watch began, its files may predate their directory's watch)."""
        if not self._watch(rel):
            return
        stack = [rel]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(os.path.join(self.root, folder) if folder else self.root))
            except OSError:
                continue
            if folder and any(entry.name == ".git" for entry in entries):
                continue  # a nested repository: git records it as a whole, never its files
            for entry in entries:
                if entry.name == ".git":
                    continue
                child = f"{folder}/{entry.name}" if folder else entry.name
                if note:
                    self._touched.add(child)
                if entry.is_dir(follow_symlinks=False) and self._watch(child):
                    stack.append(child)

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                self._lost = True
                return
            if not data:
                return
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size: offset + _HEADER.size + size].split(b"\0", 1)[0]
                offset += _HEADER.size + size
                self._event(wd, mask, os.fsdecode(name))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self._lost = True
            return
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        folder = self._dirs.get(wd)
        if folder is None:
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if not folder:
                self._lost = True  # the slot itself went away or moved
            return
        if not name or (not folder and name == ".git"):
            return
        path = f"{folder}/{name}" if folder else name
        if mask & IN_ISDIR:
            if mask & (IN_MOVED_FROM | IN_MOVED_TO):
                self._lost = True  # the moved folder's watches now name the wrong paths
                return
            if mask & IN_CREATE:
                self._touched.add(path)
                try:
                    self._watch_tree(path, note=True)
                except WatchFailed:
                    self._lost = True
                return
            if mask & IN_DELETE:
                self._touched.add(path)
            return  # a folder's own attributes are nothing git records
        self._touched.add(path)

    def take(self) -> set[str] | None:
        """The paths touched since the last call (relative to the slot), or None when some may be
        missing; either way the watch starts afresh."""
        self._read()
        touched, lost = self._touched, self._lost
        self._touched, self._lost = set(), False
        return None if lost else touched

    @property
    def lost(self) -> bool:
        """Whether the watch missed events: it must be made again (after a full scrub)."""
        self._read()
        return self._lost

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # a slot dropped without its pool's drain: its fd is not kept
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def watch(root: Path) -> SlotWatch | None:
    """A watch on a slot, or None when watching is off or impossible here."""
    if not enabled():
        return None
    try:
        return SlotWatch(root)
    except WatchFailed:
        return None
