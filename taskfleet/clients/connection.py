"""Connecting to Temporal with its standard environment configuration, failing in one clear line."""

from __future__ import annotations

import asyncio
import socket
from datetime import timedelta
from typing import Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.core.errors import StartupError

DEFAULT_ADDRESS = "localhost:7233"
__all__ = ["StartupError", "connect", "load_connect_config"]


def load_connect_config(address: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """`Client.connect` keyword arguments from TEMPORAL_* variables and profiles, flags winning."""
    try:
        profile = ClientConfigProfile.load()
        config: dict[str, Any] = dict(profile.to_client_connect_config())
    except Exception as err:  # the bridge raises plain RuntimeErrors for bad files and values
        raise StartupError(f"bad Temporal client configuration: {err}") from None
    if address:
        config["target_host"] = address
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if namespace:
        config["namespace"] = namespace
    config.setdefault("namespace", "default")
    return config


def describe(config: dict[str, Any]) -> str:
    """Where we connect, without secrets."""
    tls = "tls" if config.get("tls") else "plaintext"
    auth = ", api key set" if config.get("api_key") else ""
    return f"{config['target_host']} namespace={config['namespace']} ({tls}{auth})"


def make_runtime(metrics_address: str | None) -> Runtime | None:
    if not metrics_address:
        return None
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=metrics_address)))


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise StartupError(f"address {address!r} is not host:port")
    return host, int(port)


def port_is_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


async def connect(
    config: dict[str, Any], runtime: Runtime | None = None, timeout: float = 10.0, **extra: Any
) -> Client:
    """`Client.connect` that turns every failure into a `StartupError` naming the address."""
    kwargs = dict(config, **extra)
    if runtime is not None:
        kwargs["runtime"] = runtime
    try:
        client = await asyncio.wait_for(Client.connect(**kwargs), timeout)
    except asyncio.TimeoutError:
        raise StartupError(
            f"no Temporal server answered at {config['target_host']} within {timeout:.0f}s"
        ) from None
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StartupError(
            f"cannot connect to Temporal at {config['target_host']}: {first_line}"
        ) from None
    await _namespace_known(client, config["target_host"], timeout)
    return client


async def _namespace_known(client: Client, address: str, timeout: float) -> None:
    """A namespace the server does not have, said as such: otherwise every later call answers
    NOT_FOUND, which a command would report as a run or a batcher it cannot find. Only that answer
    stops here; a server that will not describe the namespace to us is left to the calls."""
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace),
            timeout=timedelta(seconds=timeout))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise StartupError(
                f"the Temporal server at {address} has no namespace {client.namespace!r}: pass "
                f"the right --namespace (or TEMPORAL_NAMESPACE), or create it with `temporal "
                f"operator namespace create --namespace {client.namespace}`") from None
