"""Which executors are running, on disk, so a crashed worker's executors can be killed later. Each
command carries `TASKFLEET_EXEC_TOKEN=<worker pid>-<random>`; the next worker (and live ones, now
and then) kills every process carrying a dead worker's token. A token, not a group id, names
processes: group ids are reused."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import signal
import sys
import time
from pathlib import Path

TOKEN_VARIABLE = "TASKFLEET_EXEC_TOKEN"
# Every command of one task (all attempts, on any worker) carries this key: a retry first kills what
# an earlier attempt left running here.
TASK_KEY_VARIABLE = "TASKFLEET_TASK_KEY"


def task_key(run_key: str, task_id: str) -> str:
    return hashlib.sha256(f"{run_key}\0{task_id}".encode()).hexdigest()[:24]


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first), or [] if gone. The name
    is cut at the last ")": it may hold spaces and ")"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat_fields(pid)  # a zombie counts as gone
    return not fields or fields[0] != "Z"




def no_detached_git_maintenance(env: dict[str, str]) -> None:
    """Run executors' git auto gc in the foreground (added to any `GIT_CONFIG_*`): a detached gc
    carries the task's token and would be killed with the stragglers."""
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        return  # not ours to repair: git itself will refuse it
    for key in ("gc.autoDetach", "maintenance.autoDetach"):
        env[f"GIT_CONFIG_KEY_{count}"], env[f"GIT_CONFIG_VALUE_{count}"] = key, "false"
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)


def _token_of(environ: bytes, variable: str = TOKEN_VARIABLE) -> str:
    """The value of `variable` in a process's environment (`/proc/<pid>/environ`), or ""."""
    prefix = f"{variable}=".encode()
    if environ.startswith(prefix):
        start = len(prefix)
    else:
        start = environ.find(b"\0" + prefix)
        if start < 0:
            return ""
        start += 1 + len(prefix)
    end = environ.find(b"\0", start)
    return environ[start:end if end >= 0 else len(environ)].decode(errors="replace")


def _scan(tokens: set[str], variable: str = TOKEN_VARIABLE) -> tuple[list[int], list[int]]:
    """One pass over /proc: live processes carrying one of the tokens, and those whose environment
    read empty (a process mid-`execve` reads empty for a moment: looked at again)."""
    found, unsure = [], []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if environ:
            if _token_of(environ, variable) in tokens and process_alive(pid):
                found.append(pid)
        elif pid not in _STABLY_EMPTY and _user_process(pid):
            unsure.append(pid)
    return found, unsure


# Processes whose environment stayed empty through a re-look (`env -i`, say): not mid-exec, so not
# looked at again.
_STABLY_EMPTY: set[int] = set()


def _user_process(pid: int) -> bool:
    """Alive, and not a kernel thread (those always read an empty environment)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z" and pid != 2 and fields[1] not in ("0", "2")


def processes_with_tokens(tokens: set[str]) -> list[int]:
    """Live processes whose environment carries one of these tokens: one pass over /proc."""
    return _scan(tokens)[0]


def processes_with_token(token: str) -> list[int]:
    """Live processes whose environment carries this executor token (Linux: from /proc)."""
    return processes_with_tokens({token})


def _kill_carriers(tokens: set[str], wait: float, grace: float = 0.0,
                   variable: str = TOKEN_VARIABLE) -> int:
    """Stop every live process carrying one of the tokens until none is left or `wait` runs out; how
    many. With `grace`, SIGTERM first (git removes its lock files), SIGKILL after."""
    signalled: dict[int, str] = {}  # pid -> its start time, so a reused pid is not waited on
    started = time.monotonic()
    looks_again = 5  # passes more while only processes in the middle of an exec were seen
    while time.monotonic() - started < wait:
        pids, unsure = _scan(tokens, variable)
        if not pids and _dying(signalled):
            time.sleep(0.005)
            continue
        if not pids:
            if not unsure:
                break
            if looks_again == 0:
                _STABLY_EMPTY.update(unsure)
                break
            looks_again -= 1
            time.sleep(0.005)
            continue
        hard = time.monotonic() - started >= grace
        for pid in pids:
            if pid in signalled and not hard:
                continue
            try:
                os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
                signalled.setdefault(pid, _start_time(pid))
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return len(signalled)


def _start_time(pid: int) -> str:
    """When the process started (clock ticks since boot, from /proc/<pid>/stat), or ""."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def _dying(signalled: dict[int, str]) -> bool:
    """Whether a process we signalled is still on its way out: a dying process's environment reads
    empty before it drops its files and locks; it is gone once a zombie or reaped."""
    return any(process_alive(pid) and _start_time(pid) == since for pid, since in signalled.items())


def kill_executor(token: str, pgid: int, wait: float = 5.0) -> int:
    """SIGKILL every process of the executor `token` (group `pgid`); how many were found."""
    if not sys.platform.startswith("linux"):
        if pgid <= 0:  # a record without a group: killpg(0) would be our own group
            return 0
        try:
            os.killpg(pgid, signal.SIGKILL)
            return 1
        except (ProcessLookupError, PermissionError):
            return 0
    return _kill_carriers({token}, wait)


def kill_stragglers(tokens: set[str], wait: float = 3.0, grace: float = 1.0) -> int:
    """Stop what tasks' commands left outside their groups (a `setsid` child, a daemon) in one /proc
    pass: SIGTERM, then SIGKILL after `grace`; how many. Linux only (elsewhere: 0)."""
    if not sys.platform.startswith("linux") or not tokens:
        return 0
    return _kill_carriers(tokens, wait, grace)


def kill_task_processes(key: str, wait: float = 10.0) -> int:
    """SIGKILL every process here carrying the task key (an earlier attempt's), until none is left
    or `wait` runs out; how many. Linux only (elsewhere: 0)."""
    if not sys.platform.startswith("linux") or not key:
        return 0
    return _kill_carriers({key}, wait, variable=TASK_KEY_VARIABLE)


class Stragglers:
    """`kill_stragglers` for ending tasks, one /proc pass for all that ended during the last pass: a
    hundred tasks ending together cost a few passes."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future] = {}
        self._sweeper: asyncio.Task | None = None

    async def stop(self, token: str) -> None:
        """Return once nothing carrying `token` runs any more; raises when the pass failed."""
        done = asyncio.get_running_loop().create_future()
        self._waiting[token] = done
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep())
        await asyncio.shield(done)  # a cancelled task still gets its stragglers killed

    async def _sweep(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            failure: BaseException | None = None
            try:
                await asyncio.to_thread(kill_stragglers, set(batch))
            except Exception as err:  # noqa: BLE001 - told to this pass's waiters
                failure = err
            except BaseException as err:  # the worker is stopping: nobody waits on
                failure = RuntimeError(f"straggler sweep stopped: {type(err).__name__}")
                batch.update(self._waiting)
                self._waiting = {}
                raise
            finally:
                for done in batch.values():
                    if done.done():
                        continue
                    if failure is None:
                        done.set_result(None)
                    else:
                        done.set_exception(failure)


# A worker's journal is rewritten with only the running executors once it grows past this.
JOURNAL_ROTATE_BYTES = 1 << 20


class ExecutorRecords:
    """This worker's running executors, in an append-only journal per process (a line per start and
    end): microseconds a line, where a file per command cost a millisecond."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._last_reap = 0.0
        self._running: dict[str, int] = {}  # token -> process group
        self._journal: Path | None = None
        self._fd: int | None = None
        self._written = 0

    def new_token(self) -> str:
        return f"{os.getpid()}-{secrets.token_hex(6)}"

    def record(self, token: str, pgid: int) -> None:
        self._running[token] = pgid
        self._append(f"+ {token} {pgid}\n")

    def forget(self, token: str) -> None:
        if self._running.pop(token, None) is not None:
            self._append(f"- {token}\n")

    def _append(self, line: str) -> None:
        if self._fd is None or self._written > JOURNAL_ROTATE_BYTES:
            self._rotate()
        assert self._fd is not None
        self._written += os.write(self._fd, line.encode())

    def _rotate(self) -> None:
        """A new journal holding only the running executors; the old one is deleted."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{os.getpid()}-{secrets.token_hex(4)}.journal"
        # not inherited by executors
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        text = "".join(f"+ {token} {pgid}\n" for token, pgid in self._running.items())
        self._written = os.write(fd, text.encode()) if text else 0
        old, old_fd = self._journal, self._fd
        self._journal, self._fd = path, fd
        if old_fd is not None:
            os.close(old_fd)
        if old is not None:
            old.unlink(missing_ok=True)

    def reap_dead(self) -> int:
        """Kill the executors of workers that are gone; how many processes were killed."""
        self._last_reap = time.monotonic()
        killed = 0
        for path in self.root.iterdir() if self.root.is_dir() else []:
            owner = path.name.split("-", 1)[0]
            if not owner.isdigit() or int(owner) == os.getpid() or process_alive(int(owner)):
                continue  # not a record, or its worker still runs (ours forget theirs when done)
            for token, pgid in _left_running(path).items():
                killed += kill_executor(token, pgid)
            path.unlink(missing_ok=True)
        return killed

    async def reap_now_and_then(self, every: float = 10.0) -> None:
        """`reap_dead` at most every `every` seconds, on a thread: cheap enough per task."""
        if time.monotonic() - self._last_reap >= every:
            self._last_reap = time.monotonic()  # one reap at a time, even while this one runs
            await asyncio.to_thread(self.reap_dead)


def _left_running(path: Path) -> dict[str, int]:
    """The executors a dead worker's record says were still running: token -> process group."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    if not path.name.endswith(".journal"):  # one executor per file: named by its token
        try:
            return {path.name: int(text.strip() or 0)}
        except ValueError:
            return {path.name: 0}
    running: dict[str, int] = {}
    for line in text.splitlines():  # a line cut short by the crash is skipped
        parts = line.split()
        if len(parts) == 3 and parts[0] == "+" and parts[2].isdigit():
            running[parts[1]] = int(parts[2])
        elif len(parts) == 2 and parts[0] == "-":
            running.pop(parts[1], None)
    return running
