"""docker-compose.yml cannot run here (no Docker engine); this checks its wiring instead."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def image(name: str) -> str:
    return SERVICES[name]["image"].split(":")[0]


def env(name: str) -> dict:
    value = SERVICES[name].get("environment", {})
    return value if isinstance(value, dict) else dict(item.split("=", 1) for item in value)


def test_full_stack_uses_server_and_admin_tools_not_auto_setup():
    images = {name: image(name) for name in SERVICES if "image" in SERVICES[name]}
    assert images["temporal"] == "temporalio/server"
    assert images["temporal-admin-tools"] == "temporalio/admin-tools"
    assert images["temporal-ui"] == "temporalio/ui"
    assert images["postgresql"] == "postgres"
    assert not any("auto-setup" in SERVICES[n].get("image", "") for n in SERVICES)


def test_start_order_waits_on_health_and_schema():
    assert (SERVICES["temporal-admin-tools"]["depends_on"]["postgresql"]["condition"]
            == "service_healthy")
    assert (SERVICES["temporal"]["depends_on"]["temporal-admin-tools"]["condition"]
            == "service_completed_successfully")
    assert SERVICES["temporal-ui"]["depends_on"]["temporal"]["condition"] == "service_healthy"
    worker_deps = SERVICES["taskfleet-worker"]["depends_on"]
    assert worker_deps["temporal-create-namespace"]["condition"] == "service_completed_successfully"
    for name in ("postgresql", "temporal", "taskfleet-worker", "temporal-dev"):
        assert SERVICES[name]["healthcheck"]["test"], name


def test_ports_and_addresses():
    assert "7233:7233" in SERVICES["temporal"]["ports"]
    assert "8080:8080" in SERVICES["temporal-ui"]["ports"]
    assert env("temporal-ui")["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert env("taskfleet-worker")["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert env("temporal")["POSTGRES_SEEDS"] == "postgresql"
    assert env("temporal-admin-tools")["DB"] == env("temporal")["DB"] == "postgres12"


def test_dev_profile_is_the_single_dev_server_image():
    dev = SERVICES["temporal-dev"]
    assert dev["profiles"] == ["dev"]
    assert image("temporal-dev") == "temporalio/temporal"
    assert "start-dev" in dev["command"] and "TaskfleetKind=Keyword" in dev["command"]
    assert env("taskfleet-worker-dev")["TEMPORAL_ADDRESS"] == "temporal-dev:7233"
    host_ports = {p.split(":")[0] for n in SERVICES if "dev" not in SERVICES[n].get("profiles", [])
                  for p in SERVICES[n].get("ports", [])}
    assert not host_ports & {p.split(":")[0] for p in dev["ports"]}, (
        "dev profile ports must not clash")


def test_referenced_files_exist():
    assert (ROOT / "Dockerfile").is_file()
    for script in ("setup-postgres.sh", "create-namespace.sh"):
        assert (ROOT / "docker" / script).is_file()
    assert (ROOT / "docker" / "dynamicconfig" / "development-sql.yaml").is_file()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["taskfleet-worker"]' in dockerfile
    for folder in ("taskfleet", "workflows", "activities", "examples"):
        assert f"COPY {folder}" in dockerfile
    assert Path(ROOT / "docker" / "create-namespace.sh").read_text().count(
        "search-attribute create") == 1
