"""Format reward: 1.0 when the completion is exactly ``<reasoning>...</reasoning><answer>SQL</answer>``.

"Exactly" is :func:`generator.parsing.parse_answer`'s ``well_formed``: one non-empty reasoning
block, one non-empty answer block, nothing else but whitespace. Empty tags, two answers, an
unclosed tag or chatter around the blocks all score 0 (seed 000 weight: 0.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generator.parsing import completion_text, parse_answer


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
    ...                "wrong output: SELECT 1"])
    [1.0, 0.0, 0.0, 0.0]
    """
    return [
        1.0 if parse_answer(completion_text(c), require_reasoning=require_reasoning).well_formed else 0.0
        for c in completions
    ]
