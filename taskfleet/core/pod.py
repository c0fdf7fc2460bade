"""Which pod this worker is: the name its journal, worktrees and lease are kept under, so no two
pods sharing a clone or lessons folder write the same file. In Kubernetes the host name (the pod
name); elsewhere set TASKFLEET_POD_ID, one per host or container."""

from __future__ import annotations

import os
import socket

from taskfleet.core.ids import slug


def pod_id() -> str:
    """$TASKFLEET_POD_ID, or the host name, as a slug (safe in file and branch names, lock ids)."""
    return slug(os.environ.get("TASKFLEET_POD_ID") or socket.gethostname() or "pod", limit=60)
