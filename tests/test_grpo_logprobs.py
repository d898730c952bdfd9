"""The bounded-memory group pass (generator/grpo_logprobs.py) against the plain computation it
replaces: one forward of the whole group with full logits (``completion_logprobs``) and one
backward. Values and gradients must agree to 1e-5 for every micro-batch size and prompt chunk,
with LoRA (frozen head: the stored Jacobian) and without (trainable tied head: recomputed
logits), and the GRPO step's loss must not depend on them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from generator.logprobs import completion_logprobs
from generator.grpo import grpo_loss
from generator.grpo_logprobs import group_logprobs, token_logprobs
from generator.models import ModelConfig, load_generator
from test_generator_train import make_tiny_llama, tiny_model  # noqa: F401 - the session fixture

TEMPERATURE = 0.9


def _model(tiny_model: Path, lora: bool) -> torch.nn.Module:
    model, _ = load_generator(ModelConfig(model=str(tiny_model), lora_r=4, lora_alpha=8, lora_dropout=0.0, use_lora=lora))
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.2)  # make the adapter matter
    return model.train()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def _inputs(n: int = 5, p: int = 11, t: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randint(3, 2000, (p,), generator=g), torch.randint(3, 2000, (n, t), generator=g)


def test_token_logprobs_equal_the_full_log_softmax_in_value_and_gradient():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 300, bias=True)
    h = torch.randn(3, 4, 8, requires_grad=True)
    ids = torch.randint(0, 300, (3, 4))
    full = torch.log_softmax(head(h) / TEMPERATURE, -1).gather(-1, ids[..., None]).squeeze(-1)
    weights = torch.randn(3, 4)
    (full * weights).sum().backward()
    want = h.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()
    for frozen in (False, True):  # trainable head: recompute in the backward; frozen: the stored Jacobian
        h.grad = None
        head.zero_grad()
        head.requires_grad_(not frozen)
        got = token_logprobs(h, head, ids, TEMPERATURE)
        torch.testing.assert_close(got, full.detach(), atol=1e-6, rtol=1e-6)
        (got * weights).sum().backward()
        torch.testing.assert_close(h.grad, want[0], atol=1e-6, rtol=1e-5)
        if not frozen:
            torch.testing.assert_close(head.weight.grad, want[1], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(head.bias.grad, want[2], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_group_pass_equals_one_forward_and_backward_of_the_whole_group(tiny_model, lora):  # noqa: F811
    model = _model(tiny_model, lora)
    prompt, comp = _inputs()
    weights = torch.linspace(-1, 1, comp.numel()).reshape(comp.shape)  # a loss that weighs every token differently
    want = completion_logprobs(model, prompt, comp, TEMPERATURE)
    (want * weights).sum().backward()
    want_grads = _grads(model)
    assert want_grads
    for micro_batch, prompt_chunk in [(None, None), (1, None), (2, 4), (3, 1), (5, 10)]:
        res = group_logprobs(model, prompt, comp, temperature=TEMPERATURE, micro_batch=micro_batch,
                             prompt_chunk=prompt_chunk, loss_fn=lambda rows, lp: (lp * weights[rows]).sum())  # fmt: skip
        torch.testing.assert_close(res.logp, want.detach(), atol=1e-5, rtol=1e-5)
        got = _grads(model)
        assert got.keys() == want_grads.keys(), (micro_batch, prompt_chunk)
        for name, g in want_grads.items():
            torch.testing.assert_close(got[name], g, atol=1e-5, rtol=1e-4, msg=f"{name} ({micro_batch}, {prompt_chunk})")


def test_group_pass_without_a_loss_keeps_no_graph_and_equals_the_reference(tiny_model):  # noqa: F811
    model = _model(tiny_model, True)
    prompt, comp = _inputs(n=4, p=7, t=1)  # one-token completions: only the prompt's last position
    with torch.no_grad():
        want = completion_logprobs(model, prompt, comp, TEMPERATURE)
    res = group_logprobs(model, prompt, comp, temperature=TEMPERATURE, micro_batch=3, prompt_chunk=2)
    assert not res.logp.requires_grad
    torch.testing.assert_close(res.logp, want, atol=1e-5, rtol=1e-5)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_grpo_loss_and_gradient_do_not_depend_on_the_micro_batch(tiny_model, loss_type):  # noqa: F811
    model = _model(tiny_model, True)
    prompt, comp = _inputs(n=6, t=5)
    mask = torch.ones_like(comp)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    adv = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.0, 0.4])
    ref = completion_logprobs(model, prompt, comp, TEMPERATURE).detach() - 0.1 * torch.rand(comp.shape)
    old = ref + 0.05  # a second iteration: ratios away from 1, some clipped
    kw = dict(loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.28, beta=0.01, max_completion_length=5,
              total_sequences=6, total_tokens=int(mask.sum()))  # fmt: skip
    logp = completion_logprobs(model, prompt, comp, TEMPERATURE)
    whole = grpo_loss(logp, old, ref, adv, mask, **kw)
    whole.loss.backward()
    want = _grads(model)
    for micro_batch in (1, 2, 4):
        losses = []

        def loss_fn(rows: slice, lp: torch.Tensor) -> torch.Tensor:
            out = grpo_loss(lp, old[rows], ref[rows], adv[rows], mask[rows], **kw)
            losses.append(out)
            return out.loss

        group_logprobs(model, prompt, comp, temperature=TEMPERATURE, micro_batch=micro_batch, prompt_chunk=4, loss_fn=loss_fn)
        assert abs(sum(float(o.loss.detach()) for o in losses) - float(whole.loss)) < 1e-5
        assert abs(sum(o.kl_sum for o in losses) - whole.kl_sum) < 1e-5
        assert sum(o.clip_low_sum + o.clip_high_sum for o in losses) == whole.clip_low_sum + whole.clip_high_sum
        got = _grads(model)
        for name, g in want.items():
            torch.testing.assert_close(got[name], g, atol=1e-5, rtol=1e-4, msg=f"{name} (micro-batch {micro_batch})")


def test_bad_sizes_are_refused(tiny_model):  # noqa: F811
    model = _model(tiny_model, True)
    prompt, comp = _inputs()
    with pytest.raises(ValueError, match="micro_batch"):
        group_logprobs(model, prompt, comp, micro_batch=0)
    with pytest.raises(ValueError, match="prompt_chunk"):
        group_logprobs(model, prompt, comp, prompt_chunk=0)


def test_a_sliding_window_cache_is_a_config_error_naming_the_model() -> None:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicSlidingWindowLayer

    from core.errors import ConfigError
    from generator.grpo_logprobs import _layers

    cache = DynamicCache()
    cache.layers = [DynamicSlidingWindowLayer(sliding_window=4)]
    with pytest.raises(ConfigError, match="sliding-window") as info:
        _layers(cache)
    assert info.value.where == "--model"
