"""Generator training with a tiny random Llama (SmolLM2's tokenizer): prefix-shared log-probs,
GRPO updates every trainable parameter (TRL's ``test_train``), resume, the smoke test's refusals,
SFT's answer-only loss, and batch inference. Everything runs on the tiny shop database."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from conftest import make_tiny_shop
from data_pipeline import BuildConfig, build_dataset, load_dataset
from core.errors import ConfigError, Route2SQLError
from generator.config import GRPOConfig
from generator.prompt import PromptOverrides, sample_messages
from generator.folders import load_policy, prompt_settings_for, save_generator
from generator.logprobs import completion_logprobs, selective_log_softmax
from generator.sampling import completion_mask, generate_answers, merged_lora, sample_group
from generator.generate import main as generate_main
from generator.models import DEFAULT_GENERATOR, ModelConfig, load_generator, resolve_generator
from generator.smoke import SmokeReport, require_execution_signal
from generator.train_grpo import train
from generator.train_sft import SFTExample, answer_loss_batch, answer_loss_sum
from generator.train_sft import main as sft_main

DOCS = Path(__file__).parent.parent / "docs" / "metrics.md"


def make_tiny_llama(out: Path, tokenizer_dir: str | Path, seed: int = 0, hidden_size: int = 16) -> Path:
    """A 2-layer, 16-wide (by default) random LlamaForCausalLM with SmolLM2's tokenizer, saved as a HF folder."""
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                      tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def make_tiny_data(root: Path) -> Path:
    """The tiny shop as a built data set (English, up to one join, three questions per path)."""
    db = make_tiny_shop(root / "shop.sqlite")
    build_dataset(BuildConfig(db=str(db), out=root / "data", samples_per_path=3, languages="en", max_hops=1))
    return root / "data"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), resolve_generator(DEFAULT_GENERATOR))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("tiny_shop"))


def _lora_cfg(tiny_model: Path) -> ModelConfig:
    return ModelConfig(model=str(tiny_model), lora_r=4, lora_alpha=8, lora_dropout=0.0)


def _grpo_cfg(tiny_data: Path, out: Path, tiny_model: Path, **kw) -> GRPOConfig:
    base = dict(data=tiny_data, out=out, model=_lora_cfg(tiny_model), num_generations=3, max_completion_length=6,
                prompt=PromptOverrides(k_examples=1), max_steps=3, learning_rate=1e-2, skip_smoke_test=True, dynamic_sampling="off",
                virtual_full_score=True, save_steps=1, progress=False)  # fmt: skip
    return GRPOConfig(**(base | kw))


def _trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


# --------------------------------------------------------------------------- sampling and log-probs


def test_prefix_shared_logprobs_equal_the_full_forward_in_value_and_gradient(tiny_model):
    model, _ = load_generator(_lora_cfg(tiny_model))
    torch.manual_seed(1)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.2)  # make the adapter matter
    prompt = torch.randint(3, 2000, (12,))
    comp = torch.randint(3, 2000, (3, 5))
    shared = completion_logprobs(model, prompt, comp, temperature=0.9)
    shared.sum().backward()
    g_shared = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    full_ids = torch.cat([prompt.expand(3, -1), comp], dim=1)
    logits = model(input_ids=full_ids).logits[:, 11:-1].float() / 0.9  # positions predicting the completion
    full = selective_log_softmax(logits, comp)
    full.sum().backward()
    torch.testing.assert_close(shared, full, atol=1e-5, rtol=1e-5)
    assert g_shared  # LoRA matrices got gradients through the shared prompt
    for n, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(g_shared[n], p.grad, atol=1e-5, rtol=1e-4)


def test_sample_group_gives_n_completions_masked_after_eos(tiny_model):
    model, tok = load_generator(_lora_cfg(tiny_model))
    torch.manual_seed(0)
    g = sample_group(model, tok, list(range(100, 120)), 4, max_new_tokens=5)
    assert g.completion_ids.shape[0] == 4 and g.completion_ids.shape[1] <= 5 and len(g.texts) == 4
    assert g.prompt_ids.tolist() == list(range(100, 120))
    assert torch.equal(g.mask, completion_mask(g.completion_ids, [tok.eos_token_id]))
    assert model.training  # restored after generating in eval mode


def test_merged_lora_samples_what_the_adapters_sample_and_restores_the_weights(tiny_model):
    model, tok = load_generator(_lora_cfg(tiny_model))
    torch.manual_seed(1)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.5)  # an adapter that changes what is sampled
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    draws = {}
    for merge in (False, True):
        torch.manual_seed(7)
        draws[merge] = sample_group(model, tok, list(range(100, 120)), 4, max_new_tokens=8, merge_lora=merge)
    assert torch.equal(draws[True].completion_ids, draws[False].completion_ids)
    with torch.no_grad(), merged_lora(model) as merged:
        assert merged
        base_q = model.get_base_model().model.layers[0].self_attn.q_proj
        assert not torch.allclose(base_q.base_layer.weight, before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])
    for n, p in model.named_parameters():  # unmerged on exit, to float rounding
        torch.testing.assert_close(p.detach(), before[n], atol=1e-6, rtol=1e-5)
    assert not [m for m in model.modules() if getattr(m, "merged", False)]


def test_sample_group_draws_what_plain_generate_draws(tiny_model):
    """The shared prefill and the static cache change the speed, not the samples."""
    model, tok = load_generator(_lora_cfg(tiny_model))
    model.eval()
    prompt = list(range(100, 120))
    torch.manual_seed(3)
    group = sample_group(model, tok, prompt, 3, max_new_tokens=7, temperature=0.8)
    torch.manual_seed(3)
    with torch.no_grad():
        plain = model.generate(input_ids=torch.tensor([prompt] * 3), attention_mask=torch.ones(3, 20, dtype=torch.long), do_sample=True,
                               temperature=0.8, top_k=0, max_new_tokens=7, pad_token_id=tok.pad_token_id)  # fmt: skip
    assert torch.equal(group.completion_ids, plain[:, 20:])


def test_generate_answers_is_greedy_decoding_of_each_prompt_alone(tiny_model):
    """Batched, left-padded, into a static cache: each answer is the prompt's own greedy decode."""
    model, tok = load_generator(_lora_cfg(tiny_model))
    prompts = [list(range(100, 112)), list(range(300, 305)), list(range(50, 70))]
    answers = generate_answers(model, tok, prompts, max_new_tokens=6, batch_size=2)
    model.eval()
    for p, answer in zip(prompts, answers):
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([p]), do_sample=False, max_new_tokens=6, pad_token_id=tok.pad_token_id)
        assert answer == tok.decode(out[0, len(p):], skip_special_tokens=True)


def test_generate_answers_answers_a_repeated_greedy_prompt_once(tiny_model, monkeypatch):
    """An A/B's routed and gold conditions repeat the prompt of every rightly routed question:
    greedy decoding generates it once and copies the answer; a new join clause makes it new."""
    model, tok = load_generator(_lora_cfg(tiny_model))
    a, b = list(range(100, 112)), list(range(300, 305))
    alone = generate_answers(model, tok, [a, b], max_new_tokens=6, batch_size=4)
    rows: list[int] = []
    real = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: rows.append(len(kw["input_ids"])) or real(**kw))
    answers = generate_answers(model, tok, [a, b, a, a], max_new_tokens=6, batch_size=4,
                               join_clauses=[None, None, None, "FROM t"])  # fmt: skip
    assert rows == [3]  # a, b and (a, "FROM t")
    assert answers[:3] == [alone[0], alone[1], alone[0]]


def test_ab_generation_answers_a_question_shared_by_two_conditions_once(tiny_model, tiny_data, tmp_path, monkeypatch):
    """Routed == gold for every question: one greedy pass, each prompt generated once, the same SQL in both."""
    from evaluation.ab import ABConfig, prompt_settings, run_generation

    ds = load_dataset(tiny_data)
    samples = ds.split("test")[:3]
    cfg = ABConfig(data=str(tiny_data), out=str(tmp_path / "ab"), methods=(), generator=str(tiny_model),
                   conditions=("routed", "gold"), max_new_tokens=4, batch_size=8, progress=False)  # fmt: skip
    rows: list[int] = []
    real = generate_answers

    def counting(model, tokenizer, prompts, **kw):
        rows.append(len(prompts))
        return real(model, tokenizer, prompts, **kw)

    monkeypatch.setattr("generator.sampling.generate_answers", counting)
    paths = [s.path for s in samples]
    ps = prompt_settings(cfg, str(tiny_model), {"k_examples": 0})
    metrics, by_condition = run_generation(cfg, ds, samples, {"routed": paths, "gold": paths}, ps, str(tiny_model))
    assert rows[0] == 2 * len(samples)  # both conditions in one call ...
    assert rows[1:] == [len(samples)]  # ... which generates each distinct prompt once
    assert [r["pred_sql"] for r in by_condition["routed"]] == [r["pred_sql"] for r in by_condition["gold"]]
    for key in ("execution_accuracy", "execution_success", "n"):
        assert metrics["routed"][key] == metrics["gold"][key]


# --------------------------------------------------------------------------- GRPO training


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory, tiny_model, tiny_data):
    """Three GRPO steps from a saved initial adapter; the base model writes no SQL, so every reward
    is 0 and only the virtual full score gives the groups a spread (and the policy a gradient)."""
    root = tmp_path_factory.mktemp("grpo")
    model, tok = load_generator(_lora_cfg(tiny_model))
    init = save_generator(root / "init", model, tok, {"base_model": str(tiny_model)})
    before = _trainable(model)
    cfg = _grpo_cfg(tiny_data, root / "out", tiny_model, init=init)
    result = train(cfg)
    return cfg, before, result


def test_grpo_updates_every_trainable_parameter(grpo_run):
    _, before, result = grpo_run
    after = _trainable(result.model)
    assert before.keys() == after.keys() and len(after) > 0
    unchanged = [n for n in before if torch.equal(before[n], after[n])]
    assert unchanged == []


def test_grpo_logs_every_documented_metric_and_writes_its_files(grpo_run):
    cfg, _, result = grpo_run
    documented = set(re.findall(r"^- `([^`]+)`:", DOCS.read_text(encoding="utf-8"), flags=re.M))
    logged = set(result.history[0]) - {"step"}
    assert logged == documented
    lines = [json.loads(x) for x in (cfg.out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3]
    first = lines[0]
    assert first["reward"] == 0.0 and first["frac_reward_zero_std"] == 1.0  # a random model writes no SQL
    assert first["num_completions"] == 3 and first["completions/max_length"] <= 6
    assert first["kl"] == 0.0  # the adapter starts at the base model (lora_B = 0)
    assert lines[-1]["kl"] > 0.0  # and has moved away from it
    assert lines[-1]["learning_rate"] == 0.0  # cosine schedule ends at 0
    assert (cfg.out / "reward_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in cfg.out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]  # limit 2
    for f in ("optimizer.pt", "scheduler.pt", "rng_state.pt", "trainer_state.json", "adapter_model.safetensors"):
        assert (cfg.out / "checkpoint-3" / f).is_file()
    assert list((cfg.out / "runs").glob("events.out.tfevents.*"))
    reloaded, _, _ = load_policy(ModelConfig(), cfg.out / "final")
    for n, p in _trainable(result.model).items():
        torch.testing.assert_close(dict(reloaded.named_parameters())[n], p)


def test_resume_from_a_checkpoint_reaches_the_same_parameters(grpo_run, tmp_path):
    cfg, _, result = grpo_run
    out = tmp_path / "out"
    shutil.copytree(cfg.out, out)
    shutil.rmtree(out / "checkpoint-3")
    shutil.rmtree(out / "final")
    resumed = train(replace(cfg, out=out, resume=True))
    assert [h["step"] for h in resumed.history] == [1, 2, 3]
    assert resumed.history[-1]["reward"] == result.history[-1]["reward"]
    for n, p in _trainable(result.model).items():
        torch.testing.assert_close(dict(resumed.model.named_parameters())[n], p, atol=1e-6, rtol=1e-5)


def test_a_planted_or_broken_checkpoint_file_is_refused_without_running_it(grpo_run, tmp_path):
    from conftest import PlantedPickle
    from core.errors import CheckpointError
    from generator.train_grpo import load_training_state

    cfg, _, _ = grpo_run
    ckpt = tmp_path / "checkpoint-3"
    shutil.copytree(cfg.out / "checkpoint-3", ckpt)
    step, opt, _, rng = load_training_state(ckpt, 0, 1)
    assert step == 3 and "state" in opt and set(rng) >= {"python", "numpy", "torch"}
    planted = tmp_path / "pwned"
    torch.save({"state": PlantedPickle(planted)}, ckpt / "optimizer.pt")
    with pytest.raises(CheckpointError, match=r"checkpoint-3: incomplete or unreadable checkpoint \(UnpicklingError"):
        load_training_state(ckpt, 0, 1)
    assert not planted.exists()
    torch.save([1, 2], ckpt / "optimizer.pt")
    with pytest.raises(CheckpointError, match=r"wrong kind of object"):
        load_training_state(ckpt, 0, 1)


def test_loss_types_and_dynamic_sampling_run(tiny_model, tiny_data, tmp_path):
    for loss_type, mode, signal in (("grpo", "resample", "total"), ("dr_grpo", "more", "total"),
                                    ("dapo", "resample", "execution")):  # fmt: skip
        res = train(_grpo_cfg(tiny_data, tmp_path / loss_type, tiny_model, loss_type=loss_type, max_steps=1,
                              dynamic_sampling=mode, dynamic_sampling_signal=signal, max_resamples=1,
                              virtual_full_score=False))  # fmt: skip
        h = res.history[0]
        # every group of a random model is zero-std, so the one allowed redraw is spent
        assert h["dynamic_sampling/resamples"] == 1.0 and h["dynamic_sampling/frac_zero_std_before"] == 1.0
        assert h["num_completions"] == (6.0 if mode == "more" else 3.0)
        assert h["grad_norm"] == 0.0  # zero advantages and KL 0 at the start: nothing to learn


def test_execution_signal_redraws_a_group_that_differs_only_in_proxy_rewards():
    from generator.train_grpo import Group

    def group(execution, totals):
        comps = [{"execution": e, "format": 1.0, "syntax": 1.0, "schema": t, "ngram": 0.0}
                 for e, t in zip(execution, totals, strict=True)]
        return Group(prompt=None, completions=None, components=comps, rewards=torch.tensor(totals))

    proxies_only = group([0.0, 0.0, 0.0], [0.3, 0.5, 0.4])  # nothing runs; schema reward differs
    assert not proxies_only.flat("total") and proxies_only.flat("execution")
    learns = group([0.0, 1.0, 0.0], [0.3, 3.5, 0.4])
    assert not learns.flat("total") and not learns.flat("execution")
    same = group([1.0, 1.0], [3.8, 3.8])
    assert same.flat("total") and same.flat("execution")
    with pytest.raises(ConfigError, match="^--dynamic-sampling-signal: "):
        GRPOConfig(data="d", out="o", dynamic_sampling_signal="schema")


# --------------------------------------------------------------------------- smoke test


def test_smoke_test_refuses_a_model_without_execution_reward(tiny_model, tiny_data, tmp_path):
    cfg = _grpo_cfg(tiny_data, tmp_path / "o", tiny_model, skip_smoke_test=False, smoke_samples=2, smoke_generations=2)
    with pytest.raises(Route2SQLError) as info:
        train(cfg)
    msg = str(info.value)
    db = load_dataset(tiny_data).db_path
    assert str(db) in msg and "0/4 completions with non-zero execution reward" in msg
    assert "few-shot" in msg  # the hint for a model that wrote no answer tags
    assert not list((tmp_path / "o").glob("checkpoint-*"))
    report = json.loads((tmp_path / "o" / "smoke_test.json").read_text())
    assert report["ok"] is False and report["execution_nonzero"] == 0


@pytest.mark.parametrize("kind", ["empty database", "missing file"])
def test_smoke_test_refuses_a_wrong_database(tiny_model, tiny_data, tmp_path, kind):
    wrong = tmp_path / "wrong.sqlite"
    if kind == "empty database":
        sqlite3.connect(wrong).execute("CREATE TABLE unrelated (x)").connection.close()
    cfg = _grpo_cfg(tiny_data, tmp_path / "o", tiny_model, skip_smoke_test=False, smoke_samples=1,
                    smoke_generations=2, db=wrong)  # fmt: skip
    with pytest.raises(Route2SQLError, match="smoke test") as info:
        train(cfg)
    assert str(wrong) in str(info.value)


def test_smoke_report_passes_with_one_execution_reward():
    require_execution_signal(SmokeReport("db", 10, 20, 1, 3, 3, 5))
    with pytest.raises(Route2SQLError, match="never returns the gold rows"):
        require_execution_signal(SmokeReport("db", 10, 20, 0, 20, 20, 20))  # format fine, execution dead


# --------------------------------------------------------------------------- SFT and inference


def test_sft_loss_covers_only_the_answer_tokens(tiny_model):
    model, _ = load_generator(_lora_cfg(tiny_model))
    ex = SFTExample("x", prompt_ids=[5, 6, 7, 8], target_ids=[9, 10, 2])
    loss_sum, n = answer_loss_sum(model, ex)
    logits = model(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10, 2]])).logits[0]
    # position i predicts token i + 1: the answer tokens 9, 10, 2 are predicted at positions 3, 4, 5
    manual = torch.nn.functional.cross_entropy(logits[3:6].float(), torch.tensor([9, 10, 2]), reduction="sum")
    assert n == 3
    torch.testing.assert_close(loss_sum, manual, atol=1e-5, rtol=1e-5)


def test_batched_answer_loss_equals_the_sum_of_single_ones(tiny_model):
    model, tok = load_generator(_lora_cfg(tiny_model))
    exs = [SFTExample("a", [5, 6, 7, 8, 11], [9, 10, 2]), SFTExample("b", [5, 6], [12, 2]),
           SFTExample("c", [3, 4, 5, 6, 7, 8, 9], [13, 14, 15, 2])]  # fmt: skip
    single = sum(answer_loss_sum(model, ex)[0] for ex in exs)
    batched, n = answer_loss_batch(model, exs, pad_id=tok.eos_token_id)
    assert n == 3 + 2 + 4
    torch.testing.assert_close(batched, single, atol=1e-4, rtol=1e-5)


def test_train_sft_lowers_the_loss_and_saves_a_loadable_model(tiny_model, tiny_data, tmp_path):
    # full fine-tuning: a 16-wide random model learns two answers quickly (LoRA on its attention
    # alone barely moves the near-uniform output); the LoRA save/load path is tested with GRPO
    out = tmp_path / "sft"
    summary = sft_main(["--data", str(tiny_data), "--out", str(out), "--model", str(tiny_model), "--use-lora", "False",
                        "--max-train-samples", "2", "--batch-size", "2", "--max-steps", "12", "--learning-rate", "0.05",
                        "--k-examples", "0", "--schema-detail", "compact", "--no-with-reasoning",
                        "--progress", "False"])  # fmt: skip
    assert summary["steps"] == 12 and summary["n_train_examples"] == 2
    assert summary["final_loss"] < 0.85 * summary["first_loss"]
    rates = [h["learning_rate"] for h in summary["history"]]  # the rate each step used: no warmup, cosine from 0.05
    assert rates[0] == pytest.approx(0.05) and rates[-1] > 0 and rates == sorted(rates, reverse=True)
    meta = json.loads((out / "route2sql_generator.json").read_text())
    assert meta["base_model"] == str(tiny_model) and meta["trained_by"] == "generator.train_sft"
    model, tok, eff = load_policy(ModelConfig(use_lora=False), out)
    assert eff.model == str(out) and tok.padding_side == "left"
    base, _ = load_generator(ModelConfig(model=str(tiny_model), use_lora=False))
    assert not torch.equal(model.get_input_embeddings().weight, base.get_input_embeddings().weight)
    # inference prompts the way the model was trained unless told otherwise
    trained = {"k_examples": 0, "with_reasoning": False, "schema_detail": "compact", "value_linking": True,
               "quote_all_identifiers": False}  # fmt: skip
    assert meta["prompt"] == trained | {"path": "gold"}
    gen = ["--data", str(tiny_data), "--generator", str(out), "--use-lora", "False", "--split", "train", "--limit", "1",
           "--max-new-tokens", "2", "--progress", "False"]  # fmt: skip
    asked = generate_main([*gen, "--out", str(tmp_path / "a.jsonl")])
    assert {k: asked[k] for k in trained} == trained
    assert generate_main([*gen, "--out", str(tmp_path / "b.jsonl"), "--schema-detail", "full"])["schema_detail"] == "full"
    # GRPO from this warm start prompts as it was trained, and records that
    grpo = train(_grpo_cfg(tiny_data, tmp_path / "grpo", tiny_model, init=out, prompt=PromptOverrides(),
                           model=ModelConfig(model=str(tiny_model), use_lora=False), max_steps=1, beta=0.0))
    grpo_meta = json.loads((grpo.out / "final" / "route2sql_generator.json").read_text())
    assert grpo_meta["prompt"] == trained | {"path": "gold"}
    assert grpo_meta["config"]["reward"]["require_reasoning"] is False


def test_train_sft_on_a_data_set_with_fully_quoted_gold_sql_keeps_that_style(tiny_model, tiny_data, tmp_path):
    """Data sets built before 2026-12-03 wrote "Orders"."OrderID": the warm start records it, and
    its join skeletons (prompt and forced FROM clause) are then written fully quoted too."""
    import shutil

    import sqlglot

    old = tmp_path / "old_data"
    shutil.copytree(tiny_data, old)
    rows = [json.loads(line) for line in (old / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["sql"] = sqlglot.transpile(r["sql"], read="sqlite", write="sqlite", identify=True)[0]
    (old / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "sft_old"
    sft_main(["--data", str(old), "--out", str(out), "--model", str(tiny_model), "--use-lora", "False", "--max-train-samples",
              "2", "--batch-size", "2", "--max-steps", "1", "--k-examples", "0", "--progress", "False"])  # fmt: skip
    settings = prompt_settings_for(out)
    assert settings.quote_all_identifiers is True
    ds = load_dataset(old)
    sample = next(s for s in ds.split("train") if s.path.hops > 0)
    prompt = sample_messages(sample, ds, None, path=sample.path, prompt=settings)[-1]["content"]
    assert f'Join skeleton: {ds.graph.from_clause(sample.path, quote_all=True)}' in prompt and 'FROM "' in prompt


def test_generate_cli_answers_and_scores_a_split(tiny_model, tiny_data, tmp_path):
    out = tmp_path / "preds.jsonl"
    summary = generate_main(["--data", str(tiny_data), "--out", str(out), "--model", str(tiny_model), "--split", "train",
                             "--limit", "3", "--max-new-tokens", "4", "--progress", "False"])  # fmt: skip
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 and summary["n"] == 3
    assert {"completion", "gold_sql", "execution", "format", "total", "exact", "reason"} <= set(rows[0])
    assert summary["execution_accuracy"] == 0.0 and summary["path_source"] == "gold"
    assert json.loads(out.with_name("preds.summary.json").read_text())["n"] == 3


def test_an_adapter_for_another_base_model_is_one_checkpoint_error(tiny_model, tmp_path):
    model, tok = load_generator(_lora_cfg(tiny_model))
    folder = save_generator(tmp_path / "gen", model, tok, {"base_model": str(tiny_model)})
    wider = make_tiny_llama(tmp_path / "wider", resolve_generator(DEFAULT_GENERATOR), hidden_size=32)
    meta = json.loads((folder / "route2sql_generator.json").read_text())
    (folder / "route2sql_generator.json").write_text(json.dumps(meta | {"base_model": str(wider)}))
    with pytest.raises(Route2SQLError, match=r"adapter weights do not fit the base model .*wider"):
        load_policy(ModelConfig(), folder)
