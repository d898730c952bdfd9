"""Reading the SQL out of a generator completion: the answer format the generator is trained to write.

The format and its parser belong to the rewards that judge it and live in :mod:`rewards.answer`;
the generator's prompts, SFT targets and evaluation read them from here.
"""

from __future__ import annotations

from rewards.answer import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    MAX_ANSWER_CHARS,
    REASONING_CLOSE,
    REASONING_OPEN,
    ParsedAnswer,
    clean_sql,
    completion_text,
    parse_answer,
    refused_outright,
    score_against_gold,
    tag_blocks,
)

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "MAX_ANSWER_CHARS",
    "REASONING_CLOSE",
    "REASONING_OPEN",
    "ParsedAnswer",
    "clean_sql",
    "completion_text",
    "parse_answer",
    "refused_outright",
    "score_against_gold",
    "tag_blocks",
]
