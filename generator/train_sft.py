"""``python -m generator.train_sft --data DIR --out DIR``: warm-start the generator on gold SQL.

Each training sample becomes one chat: the GRPO prompt (question, gold path, path schema, join
skeleton, ``k`` retrieved examples, never the sample itself) and, as the assistant turn, the
gold answer in the exact format :func:`generator.prompt.render_completion` writes (reasoning
derived from the path, then the SQL), ended by the end-of-turn token. The loss is the mean
cross-entropy over those answer tokens only; prompt tokens carry no loss and their logits are
never computed. LoRA by default, AdamW with linear warm-up then cosine decay, a progress bar,
and the result saved with :func:`generator.folders.save_generator` (adapter, tokenizer,
``route2sql_generator.json``) in one rename.

Why: a base SmolLM2-135M never wrote the answer tags with a plain instruction; this
warm start (or few-shot prompts) is what makes the execution reward non-zero before GRPO.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, get_cosine_schedule_with_warmup

from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.errors import DataError
from core.io import ensure_writable_dir, refuse_overlap
from core.progress import progress_bar
from core.samples import Sample
from generator.config import GeneratorSFTConfig, config_to_dict
from generator.folders import load_policy, save_generator
from generator.prompt import PromptSettings, prompt_token_ids, quotes_every_identifier, sample_messages
from generator.prompt import path_reasoning, render_completion
from generator.retrieval import ExampleRetriever


@dataclass(frozen=True)
class SFTExample:
    """One tokenised training chat: ``prompt_ids`` (no loss) then ``target_ids`` (the loss)."""

    sample_id: str
    prompt_ids: list[int]
    target_ids: list[int]


def target_text(sample: Sample, with_reasoning: bool = True) -> str:
    """The assistant turn SFT teaches: the gold SQL in the answer format (reasoning from the path)."""
    return render_completion(sample.sql, path_reasoning(sample.path) if with_reasoning else None)


def build_examples(
    samples: Sequence[Sample],
    ds: BuiltDataset,
    tokenizer: PreTrainedTokenizerBase,
    *,
    prompt: PromptSettings,
    max_tokens: int,
    retriever: ExampleRetriever | None,
) -> tuple[list[SFTExample], int]:
    """Tokenise every sample's prompt (gold path, built as ``prompt`` says) and target; drop
    those over ``max_tokens``.

    Returns:
        ``(examples, n_skipped)``.
    """
    eos = tokenizer.eos_token or ""
    out: list[SFTExample] = []
    skipped = 0
    for s in samples:
        ids = prompt_token_ids(tokenizer, sample_messages(s, ds, retriever, path=s.path, prompt=prompt))
        target = tokenizer(target_text(s, prompt.with_reasoning) + eos, add_special_tokens=False)["input_ids"]
        if len(ids) + len(target) > max_tokens:
            skipped += 1
            continue
        out.append(SFTExample(s.id, ids, list(target)))
    return out, skipped


def answer_loss_sum(model: torch.nn.Module, ex: SFTExample) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy of ``ex.target_ids`` given the prompt; logits made only for the target.

    Returns:
        ``(loss_sum, n_target_tokens)``; divide by the step's token count before ``backward``.
    """
    ids = torch.tensor([ex.prompt_ids + ex.target_ids[:-1]], dtype=torch.long)
    n = len(ex.target_ids)
    logits = model(input_ids=ids, logits_to_keep=n).logits[0].float()  # (n, V): positions P-1 .. P+n-2
    targets = torch.tensor(ex.target_ids, dtype=torch.long)
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum"), n


def answer_loss_batch(model: torch.nn.Module, batch: Sequence[SFTExample], pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed answer cross-entropy of several examples in one forward pass (left padding).

    Every chat is ``prompt + target[:-1]``, left-padded to the longest; position ids restart at
    each chat's first real token, so padding changes nothing but the batch's shape. Logits are
    made for the last ``max(len(target))`` positions only, where each chat's answer sits at the
    end; positions before a shorter answer are masked. (On two CPU cores it measured slower than
    the chats one by one on Northwind: 19 s vs 16 s per step of 8; see ``--pack``.)

    Returns:
        ``(loss_sum, n_target_tokens)``, equal (up to float rounding) to the sum of
        :func:`answer_loss_sum` over ``batch``.
    """
    seqs = [ex.prompt_ids + ex.target_ids[:-1] for ex in batch]
    # widths rounded up to a multiple of 64: few distinct shapes, so the allocator reuses its
    # buffers instead of growing (100 steps of free widths reached 18 GB of RSS on SmolLM2)
    width = -(-max(len(q) for q in seqs) // 64) * 64
    keep = -(-max(len(ex.target_ids) for ex in batch) // 32) * 32
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), keep), -100, dtype=torch.long)
    for row, (q, ex) in enumerate(zip(seqs, batch, strict=True)):
        ids[row, width - len(q) :] = torch.tensor(q)
        attn[row, width - len(q) :] = 1
        labels[row, keep - len(ex.target_ids) :] = torch.tensor(ex.target_ids)
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100, reduction="sum")  # fmt: skip
    return loss, int((labels != -100).sum())


def micro_batches(batch: Sequence[SFTExample], max_tokens: int) -> list[list[SFTExample]]:
    """``batch`` sorted by length and cut into groups whose padded size (rows x longest chat)
    stays within ``max_tokens``: memory grows with that size (attention keeps rows x width^2
    scores per layer for the backward pass), so one long chat never pads seven short ones.

    >>> ex = lambda n: SFTExample(str(n), [0] * n, [1])
    >>> [[len(e.prompt_ids) for e in m] for m in micro_batches([ex(300), ex(100), ex(120), ex(900)], 800)]
    [[100, 120], [300], [900]]
    """
    out: list[list[SFTExample]] = []
    for ex in sorted(batch, key=lambda e: len(e.prompt_ids) + len(e.target_ids)):
        width = len(ex.prompt_ids) + len(ex.target_ids)
        if out and (len(out[-1]) + 1) * width <= max_tokens:
            out[-1].append(ex)
        else:
            out.append([ex])
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train and save; returns the run summary (also stored in the output's meta file)."""
    cfg = parse(GeneratorSFTConfig, argv, description=__doc__)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    refuse_overlap({"--out": cfg.out}, {"--data": cfg.data, "--db": cfg.db})
    ensure_writable_dir(cfg.out.parent if cfg.out.parent != cfg.out else cfg.out)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)

    ds = load_dataset(cfg.data, db_path=cfg.db, sql_user="generator.train_sft")
    train = ds.split("train")
    if not train:
        raise DataError("the data set has no training samples", where=cfg.data)
    # a data set built before 2026-12-03 quotes every name in its gold queries: the join skeleton
    # in the prompt (and the FROM clause forced later) is written the same way
    cfg = replace(cfg, prompt=replace(cfg.prompt, quote_all_identifiers=quotes_every_identifier(s.sql for s in train)))
    pool = list(train)
    if cfg.max_train_samples is not None and cfg.max_train_samples < len(pool):
        pool = rng.sample(pool, cfg.max_train_samples)
    model, tokenizer, model_cfg = load_policy(cfg.model)
    retriever = ExampleRetriever(train) if cfg.prompt.k_examples > 0 else None
    examples, skipped = build_examples(pool, ds, tokenizer, prompt=cfg.prompt, max_tokens=cfg.max_prompt_tokens,
                                       retriever=retriever)  # fmt: skip
    if not examples:
        raise DataError(f"every training prompt is longer than --max-prompt-tokens {cfg.max_prompt_tokens}",
                        where=cfg.data)  # fmt: skip

    steps_per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total_steps = cfg.max_steps or max(1, math.ceil(steps_per_epoch * cfg.num_epochs))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)

    order: list[SFTExample] = []
    history: list[dict[str, float]] = []
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    t0 = time.perf_counter()
    bar = progress_bar(range(total_steps), desc="generator SFT", enabled=cfg.progress, unit="step")
    for step in bar:
        batch = []
        while len(batch) < cfg.batch_size:
            if not order:
                order = list(examples)
                rng.shuffle(order)
            batch.append(order.pop())
        n_tokens = sum(len(ex.target_ids) for ex in batch)
        loss_total = 0.0
        if cfg.pack:
            for micro in micro_batches(batch, cfg.pack_tokens):
                loss_sum, _ = answer_loss_batch(model, micro, pad_id)
                (loss_sum / n_tokens).backward()
                loss_total += float(loss_sum.detach())
        else:
            for ex in batch:
                loss_sum, _ = answer_loss_sum(model, ex)
                (loss_sum / n_tokens).backward()
                loss_total += float(loss_sum.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        lr = scheduler.get_last_lr()[0]  # the rate this step used (the scheduler moves on below)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        rec = {"step": step + 1, "loss": loss_total / n_tokens, "grad_norm": grad_norm, "learning_rate": lr}
        history.append(rec)
        bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['learning_rate']:.2e}")
    seconds = time.perf_counter() - t0

    summary = {
        "trained_by": "generator.train_sft",
        "base_model": model_cfg.model,
        "config": config_to_dict(cfg),
        "prompt": cfg.prompt.to_dict() | {"path": "gold"},
        "n_train_examples": len(examples),
        "n_skipped_too_long": skipped,
        "steps": total_steps,
        "first_loss": history[0]["loss"],
        "final_loss": sum(h["loss"] for h in history[-5:]) / len(history[-5:]),
        "seconds": round(seconds, 1),
        "history": history,
    }
    save_generator(cfg.out, model, tokenizer, summary)
    print(f"saved {cfg.out} ({total_steps} steps, {len(examples)} examples, {skipped} too long, {seconds:.0f} s; "
          f"loss {summary['first_loss']:.3f} -> {summary['final_loss']:.3f})")  # fmt: skip
    return summary


if __name__ == "__main__":
    run_main(main)
