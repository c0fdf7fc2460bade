"""Make sure our search attributes exist on the namespace, where the operator API allows it."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.core.errors import StartupError
from taskfleet.core.search_attributes import ALL, HOW_TO_ADD

# (server, namespace) -> the notice of the first attempt ("" when they exist): once per process.
_checked: dict[tuple[str, str], str] = {}


async def ensure_search_attributes(client: Client) -> str:
    """Add `TaskfleetKind` and `TaskfleetRepo` if missing (idempotent); "" when they exist, else a
    line on how an operator adds them. A missing namespace is a `StartupError`."""
    key = (client.service_client.config.target_host, client.namespace)
    if key in _checked:
        return _checked[key]
    notice = ""
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        missing = [k.name for k in ALL if k.name not in listed.custom_attributes
                   and k.name not in listed.system_attributes]
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=client.namespace, search_attributes={
                    name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing}))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            # Not a permission matter: nothing will start in a namespace that does not exist.
            raise StartupError(
                f"namespace {client.namespace} does not exist on {key[0]} ({err.message.strip()})"
            ) from None
        notice = (
            f"search attributes TaskfleetKind/TaskfleetRepo could not be added to namespace "
            f"{client.namespace} ({err.status.name}: {err.message}); workflows start without them. "
            f"To add them: {HOW_TO_ADD.format(namespace=client.namespace)}"
        )
    _checked[key] = notice
    return notice
