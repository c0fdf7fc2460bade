"""The run summary shows Claude's accounting only when there was any;
`--implementer`/`--model` parse."""

from __future__ import annotations

import argparse

from taskfleet.cli.run import _board_overrides, add_commands, summary_table
from taskfleet.core.models.orchestrator import OrchestratorResult, OrchestratorStats, TaskOutcome


def test_summary_shows_claude_line_only_when_used() -> None:
    plain = OrchestratorResult(tasks=[TaskOutcome(id="A", status="succeeded")],
                               stats=OrchestratorStats())
    assert "Claude" not in summary_table(plain)
    stats = OrchestratorStats(llm_api_calls=1, llm_requests=3, llm_input_tokens=1200,
                              llm_output_tokens=300, llm_cache_read_tokens=400, llm_cost_usd=0.0123)
    line = summary_table(OrchestratorResult(tasks=plain.tasks, stats=stats)).splitlines()[-1]
    assert line == ("Claude: 3 request(s) in 1 API call(s), tokens in 1200 (cache read 400) "
                    "out 300, est. $0.0123")


def test_run_takes_implementer_and_model_flags() -> None:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    args = parser.parse_args(
        ["run", "b.md", "--repo", ".", "--implementer", "anthropic", "--model", "claude-x"])
    overrides = _board_overrides(args)
    assert overrides["implementer"] == "anthropic" and overrides["model"] == "claude-x"
