"""One prompt contract: PromptSettings chosen when a generator trains, PromptOverrides on the commands that use it."""

from __future__ import annotations

import json

import pytest

from core.cli import parse
from core.errors import CheckpointError, ConfigError
from generator.config import GenerateConfig, GeneratorSFTConfig, GRPOConfig
from generator.folders import GENERATOR_META, prompt_settings_for
from generator.prompt import UNTRAINED_PROMPT, PromptOverrides, PromptSettings


def _folder(tmp_path, prompt):
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / GENERATOR_META).write_text(json.dumps({"base_model": "x", "prompt": prompt}), encoding="utf-8")
    return gen


def test_a_trained_folder_is_prompted_as_it_was_trained(tmp_path):
    gen = _folder(tmp_path, {"k_examples": 0, "with_reasoning": False, "schema_detail": "compact",
                             "value_linking": True, "path": "router"})  # fmt: skip
    assert prompt_settings_for(gen) == PromptSettings(0, False, "compact", True, quote_all_identifiers=True)
    assert prompt_settings_for(gen, PromptOverrides(schema_detail="full")) == PromptSettings(0, False, "full", True, True)


def test_a_folder_trained_on_fully_quoted_sql_is_asked_in_that_style(tmp_path):
    """Folders from before 2026-12-03 record no quote_all_identifiers: their gold SQL quoted every name."""
    old = _folder(tmp_path, {"k_examples": 0, "with_reasoning": False, "schema_detail": "compact", "value_linking": True})
    assert prompt_settings_for(old).quote_all_identifiers is True
    new = tmp_path / "new"
    new.mkdir()
    (new / GENERATOR_META).write_text(json.dumps({"base_model": "x", "prompt": PromptSettings(k_examples=0).to_dict()}))
    assert prompt_settings_for(new).quote_all_identifiers is False
    assert prompt_settings_for(None).quote_all_identifiers is False


def test_a_folder_from_before_value_linking_keeps_it_off(tmp_path):
    gen = _folder(tmp_path, {"k_examples": 3, "with_reasoning": True, "schema_detail": "full"})
    assert prompt_settings_for(gen) == PromptSettings(3, True, "full", False, True)


def test_a_base_model_gets_the_untrained_prompt():
    assert prompt_settings_for(None) == UNTRAINED_PROMPT == PromptSettings(2, True, "full", True)
    assert prompt_settings_for("SmolLM2-135M-Instruct", PromptOverrides(k_examples=0)).k_examples == 0


def test_an_unreadable_folder_is_a_checkpoint_error(tmp_path):
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / GENERATOR_META).write_text("{oops", encoding="utf-8")
    with pytest.raises(CheckpointError, match="unreadable"):
        prompt_settings_for(gen)


def test_the_flags_are_the_same_on_every_command():
    sft = parse(GeneratorSFTConfig, ["--data", "d", "--out", "o", "--k-examples", "0", "--no-with-reasoning",
                                     "--schema-detail", "compact", "--no-value-linking"])  # fmt: skip
    assert sft.prompt == PromptSettings(0, False, "compact", False)
    assert parse(GeneratorSFTConfig, ["--data", "d", "--out", "o"]).prompt == PromptSettings(1, True, "full", True)
    grpo = parse(GRPOConfig, ["--data", "d", "--out", "o", "--no-with-reasoning", "--value-linking", "--no-use-lora"])
    assert grpo.prompt == PromptOverrides(with_reasoning=False, value_linking=True)
    assert grpo.reward.require_reasoning is False and grpo.model.use_lora is False
    assert parse(GenerateConfig, ["--data", "d", "--out", "o"]).prompt == PromptOverrides()


def test_bad_settings_name_their_flag():
    with pytest.raises(ConfigError, match="^--k-examples: "):
        PromptSettings(k_examples=-1)
    with pytest.raises(ConfigError, match="^--schema-detail: "):
        PromptOverrides(schema_detail="tiny")
