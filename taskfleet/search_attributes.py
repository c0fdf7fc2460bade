"""Search attributes taskfleet sets on its workflows, so the UI and `temporal workflow list` can filter."""

from temporalio.common import SearchAttributeKey

TASKFLEET_KIND = SearchAttributeKey.for_keyword("TaskfleetKind")
TASKFLEET_REPO = SearchAttributeKey.for_keyword("TaskfleetRepo")

ALL = (TASKFLEET_KIND, TASKFLEET_REPO)


def dev_server_flags() -> list[str]:
    """`--search-attribute` flags that register ours on `temporal server start-dev`."""
    return [f for key in ALL for f in ("--search-attribute", f"{key.name}=Keyword")]
