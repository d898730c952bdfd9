"""Format reward: 1.0 when the completion is exactly ``<reasoning>...</reasoning><answer>SQL</answer>``.

"Exactly" is :func:`rewards.answer.parse_answer`'s ``well_formed``: one non-empty reasoning
block, one non-empty answer block, nothing else but whitespace. Empty tags, two answers, an
unclosed tag or chatter around the blocks all score 0 (seed 000 weight: 0.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rewards.answer import completion_text, parse_answer, refused_outright


def format_reward(completions: Sequence[Any], *, require_reasoning: bool = True, **kwargs: Any) -> list[float]:
    """1.0 for each completion in the exact answer format, else 0.0.

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        require_reasoning: when False, ``<answer>SQL</answer>`` alone is the format.
        **kwargs: ignored (TRL passes prompts and data set columns).

    Returns:
        One float per completion, shape ``(batch,)``; never None (the format always applies).

    >>> format_reward(["<reasoning>join two tables</reasoning>\\n<answer>SELECT 1</answer>",
    ...                "<answer>SELECT 1</answer>",
    ...                "<reasoning></reasoning><answer>SELECT 1</answer>",
    ...                "wrong output: SELECT 1",
    ...                "<reasoning>clean up</reasoning><answer>DELETE FROM orders</answer>"])
    [1.0, 0.0, 0.0, 0.0, 0.0]
    """
    return [format_score(completion_text(c), require_reasoning=require_reasoning) for c in completions]


def format_score(text: str, *, require_reasoning: bool = True) -> float:
    """:func:`format_reward` of one completion's text: 1.0 or 0.0."""
    parsed = parse_answer(text, require_reasoning=require_reasoning)
    return 1.0 if parsed.well_formed and not refused_outright(parsed.sql) else 0.0
