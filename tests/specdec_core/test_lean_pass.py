"""The lean pass (lean_pass.py) against transformers' forward: the same logits, features and greedy tokens,
for one token and for k + 1, after rollbacks and for draft trees; and the fallback where it does not apply."""

import copy
import logging

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from specdec_core import DraftConfig, GenerationConfig, autoregressive, generated_tokens, speculative
from specdec_core.cpu_kernels import release_dense_weights, speed_up_linears
from specdec_core.drafters.ngram import NgramDrafter
from specdec_core.kv_cache import CachedModel
from specdec_core.lean_pass import fuse_projections, is_lean, lean_unsupported, run_pass
from tests.conftest import layer_outputs, tiny_llama

CONTEXT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def lean_copy(model, release: bool = True):
    """model's weights, fused and packed as models.py loads a served model."""
    lean = copy.deepcopy(model)
    assert fuse_projections(lean)
    speed_up_linears(lean)
    return release_dense_weights(lean) if release else lean


@pytest.fixture(scope="module")
def stock():
    """transformers as a user runs it: stock nn.Linear, dense weights."""
    return tiny_llama(seed=5, vocab_size=48, layers=3, fast=False)


@pytest.fixture(scope="module")
def lean(stock):
    return lean_copy(stock)


def test_fused_layers_replace_the_separate_ones(lean, stock):
    attention, mlp = lean.model.layers[0].self_attn, lean.model.layers[0].mlp
    assert is_lean(lean) and not is_lean(stock)
    assert not hasattr(attention, "q_proj") and not hasattr(mlp, "up_proj")
    assert (
        attention.qkv_proj.out_features
        == stock.model.layers[0].self_attn.q_proj.out_features + 2 * stock.model.layers[0].self_attn.k_proj.out_features
    )
    assert sum(p.numel() for p in lean.parameters()) == sum(
        p.numel() for p in stock.parameters()
    )  # the same bytes, fused


@pytest.mark.parametrize("width", [1, 4])
def test_logits_and_features_equal_transformers_forward_after_rollbacks(lean, stock, width, cpu_path):
    """One token and a k + 1 verification pass, each after a rollback of rejected drafts."""
    ours, theirs = CachedModel(lean), CachedModel(stock)
    for cached in (ours, theirs):
        cached.forward(CONTEXT)
        cached.forward([7, 8, 9, 10, 11], logits_to_keep=5)
        cached.rollback(len(CONTEXT) + 2)  # two drafts kept, three rejected
    new = [12, 13, 14, 15][:width]
    logits, features = ours.forward_with_features(new, (-1,), logits_to_keep=width)
    expected_logits, expected_features = theirs.forward_with_features(new, (-1,), logits_to_keep=width)
    torch.testing.assert_close(logits, expected_logits, **TOLERANCE)
    torch.testing.assert_close(features, expected_features, **TOLERANCE)  # the hand-off to the EAGLE head
    assert ours.length == theirs.length == len(CONTEXT) + 2 + width


@pytest.mark.parametrize("layers", [(0, 1, 2), (0, 2), (-1,)])
def test_features_of_several_layers_are_their_outputs_side_by_side(lean, stock, layers):
    """The fused head's hand-off (EAGLE-3: a low, a middle and a high layer), on both passes, against the
    layers' outputs computed one by one (conftest.layer_outputs)."""
    own = layer_outputs(stock, CONTEXT + [7, 8, 9])
    expected = torch.cat([own[i] for i in layers], dim=-1)[len(CONTEXT) :]
    for model in (lean, stock):
        cached = CachedModel(model)
        cached.forward(CONTEXT)
        _, features = cached.forward_with_features([7, 8, 9], layers, logits_to_keep=3)
        torch.testing.assert_close(features, expected, **TOLERANCE)


def test_tree_pass_and_compaction_equal_transformers_forward(lean, stock):
    """A draft tree verified with its 4D mask, then compacted to one path: the same logits and cache."""
    parents = (-1, -1, 0, 0, 2)  # two roots; the first has two children; a grandchild
    ours, theirs = CachedModel(lean), CachedModel(stock)
    for cached in (ours, theirs):
        cached.forward(CONTEXT[:-1])
    logits = ours.forward([CONTEXT[-1], 20, 21, 22, 23, 24], logits_to_keep=6, parents=parents)
    torch.testing.assert_close(
        logits, theirs.forward([CONTEXT[-1], 20, 21, 22, 23, 24], logits_to_keep=6, parents=parents), **TOLERANCE
    )
    for cached in (ours, theirs):
        cached.compact(len(CONTEXT) - 1, [0, 1, 3, 5])  # the tail, then root 20 -> 22 -> 24
    torch.testing.assert_close(ours.forward([30]), theirs.forward([30]), **TOLERANCE)


def test_greedy_tokens_equal_generate_plain_and_speculative(lean, stock):
    config = GenerationConfig(max_new_tokens=24)
    expected = stock.generate(torch.tensor([CONTEXT]), max_new_tokens=24, do_sample=False)[0, len(CONTEXT) :].tolist()
    assert generated_tokens(autoregressive(lean, CONTEXT, config, frozenset())) == expected
    events = speculative(lean, NgramDrafter(), CONTEXT, config, DraftConfig(k=3, adaptive=True), frozenset())
    assert generated_tokens(events) == expected


def test_bfloat16_lean_pass_stays_close(stock, cpu_path):
    """A cheaper-dtype copy (the bfloat16 draft) takes the lean pass too, on either CPU path."""
    ours = lean_copy(copy.deepcopy(stock).to(torch.bfloat16))
    theirs = copy.deepcopy(stock).to(torch.bfloat16)
    expected = CachedModel(theirs).forward(CONTEXT, logits_to_keep=3)
    torch.testing.assert_close(CachedModel(ours).forward(CONTEXT, logits_to_keep=3), expected, rtol=5e-2, atol=5e-2)


def test_transformers_forward_of_a_fused_model_is_refused_clearly(lean):
    with pytest.raises(TypeError, match="fused for the lean pass"):
        lean(torch.tensor([CONTEXT]))


def test_turned_off_or_unsupported_models_keep_transformers_forward(stock, monkeypatch, caplog):
    monkeypatch.setenv("SPECDEC_LEAN", "0")
    model = copy.deepcopy(stock)
    with caplog.at_level(logging.INFO, logger="specdec_core.lean_pass"):
        assert not fuse_projections(model)
    assert "SPECDEC_LEAN=0" in caplog.text and not is_lean(model)
    monkeypatch.delenv("SPECDEC_LEAN")
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=48, n_embd=32, n_layer=1, n_head=2)).eval()
    assert "gpt2" in lean_unsupported(gpt2)
    assert not fuse_projections(gpt2)
    logits, _ = run_pass(gpt2, torch.tensor([CONTEXT]), None)  # transformers' forward, through the same entry
    assert logits.shape == (1, 1, 48)
