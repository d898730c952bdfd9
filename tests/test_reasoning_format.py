"""SQL-only prompts (--no-with-reasoning) are paid the format reward for SQL-only answers."""

from __future__ import annotations

from generator.config import GenerateConfig, GRPOConfig
from generator.prompt import PromptOverrides
from rewards.sql import format_reward


def test_grpo_without_reasoning_does_not_require_a_reasoning_block() -> None:
    sql_only = GRPOConfig(data="d", out="o", prompt=PromptOverrides(with_reasoning=False))
    assert sql_only.reward.require_reasoning is False
    assert list(format_reward(["<answer>SELECT 1</answer>"], require_reasoning=sql_only.reward.require_reasoning)) == [1.0]
    assert GRPOConfig(data="d", out="o").reward.require_reasoning is True


def test_generate_without_reasoning_scores_the_same_way() -> None:
    assert GenerateConfig(data="d", out="o", prompt=PromptOverrides(with_reasoning=False)).reward.require_reasoning is False
    assert list(format_reward(["<answer>SELECT 1</answer>"], require_reasoning=True)) == [0.0]
