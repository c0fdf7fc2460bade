"""The reference pages say what the code does: generated pages are up to date, and every
environment variable the code reads is on docs/reference/environment.md (and only those)."""

from __future__ import annotations

from tests.reference_docs import (
    GENERATED,
    ROOT,
    missing_raw_inputs,
    variables_in_code,
    variables_in_page,
)

# Named by the deployment files, not by the product's code.
DEPLOYMENT_ONLY = {"TASKFLEET_REPOS_DIR"}


def test_generated_reference_pages_are_up_to_date():
    for name, render in GENERATED.items():
        assert (ROOT / name).read_text() == render() + "\n", (
            f"{name} is stale: run `make reference`")


def test_every_environment_variable_is_documented_and_every_documented_one_is_read():
    in_code = variables_in_code()
    documented = variables_in_page(ROOT / "docs" / "reference" / "environment.md")
    assert in_code - documented == set(), (
        "read by the code, missing from docs/reference/environment.md")
    assert documented - in_code - DEPLOYMENT_ONLY == set(), (
        "documented, but the code never reads them")
    compose = (ROOT / "docker-compose.yml").read_text()
    assert all(name in compose for name in DEPLOYMENT_ONLY)


def test_every_handler_that_takes_raw_input_says_what_it_accepts():
    assert missing_raw_inputs() == [], "describe them in tests/reference_docs.py RAW_INPUTS"
