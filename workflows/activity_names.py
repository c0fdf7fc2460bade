"""The activity names a workflow schedules: prefixed ones, or the old ones when replaying a history
recorded before the prefix (so workflows started by an older taskfleet still replay)."""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.names import LEGACY_ACTIVITY_NAMES, PATCH_PREFIXED_ACTIVITIES


def activity_name(name: str) -> str:
    return name if workflow.patched(PATCH_PREFIXED_ACTIVITIES) else LEGACY_ACTIVITY_NAMES[name]
