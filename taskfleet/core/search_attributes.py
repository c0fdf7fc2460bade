"""Search attributes taskfleet sets on its workflows, for filtering in the UI and `temporal workflow
list`: a convenience, so on a namespace without them workflows start without them."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

TASKFLEET_KIND = SearchAttributeKey.for_keyword("TaskfleetKind")
TASKFLEET_REPO = SearchAttributeKey.for_keyword("TaskfleetRepo")

ALL = (TASKFLEET_KIND, TASKFLEET_REPO)

HOW_TO_ADD = (
    "temporal operator search-attribute create --namespace {namespace} "
    "--name TaskfleetKind --type Keyword --name TaskfleetRepo --type Keyword"
)


def dev_server_flags() -> list[str]:
    """`--search-attribute` flags that register ours on `temporal server start-dev`."""
    return [f for key in ALL for f in ("--search-attribute", f"{key.name}=Keyword")]


def tagged(kind: str, repo: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [SearchAttributePair(TASKFLEET_KIND, kind), SearchAttributePair(TASKFLEET_REPO, repo)])


def is_unknown_search_attribute(err: BaseException) -> bool:
    """The server refused a start because the namespace lacks one of our search attributes."""
    return (isinstance(err, RPCError) and "search attribute" in str(err).lower()
            and ("no mapping" in str(err).lower() or "not defined" in str(err).lower()
                 or "unknown" in str(err).lower()))
