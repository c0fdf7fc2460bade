"""Which pod this worker is: the name its journal, its worktrees and its lease are kept under.

Pods share a clone and a lessons folder; anything one pod writes there carries its pod id, so no
two pods ever write the same file or name the same worktree. In Kubernetes the host name is the pod
name (unique in its namespace); elsewhere set TASKFLEET_POD_ID, one per host or container.
"""

from __future__ import annotations

import os
import socket

from taskfleet.core.ids import slug


def pod_id() -> str:
    """$TASKFLEET_POD_ID, or the host name; as a slug (safe in file names, branch names, lock ids)."""
    return slug(os.environ.get("TASKFLEET_POD_ID") or socket.gethostname() or "pod", limit=60)
