"""`npudure local --contexts N`: read as 1..64 or auto, and written into every agent's config."""

from __future__ import annotations

import argparse

from npudure.config import AgentConfig
from npudure_workshop.lab import local


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    local.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_contexts_default_to_auto_and_reach_the_agents_config() -> None:
    assert _parse().contexts == "auto" and _parse("--contexts", "12").contexts == 12
    for value in ("auto", 12):
        written = local.LocalCluster(boards=1, contexts=value)._agent_config("board1", 1, {})
        assert written["contexts"] == value
        assert AgentConfig.model_validate(written).contexts == value  # the agent accepts what is written
