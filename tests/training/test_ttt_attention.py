"""The unrolled pass's structured attention equals SDPA under the dense training-time-test mask, values and
gradients."""

import pytest
import torch
import torch.nn.functional as F

from specdec_core.drafters.eagle_head import EagleHead, HeadConfig
from tests.conftest import tiny_llama
from training import ttt_attention
from training.train_head import unrolled_pass


def dense_mask(width: int, depth: int) -> torch.Tensor:
    """[width, depth * width] bool, the reference: entry j at depth s sees the real entries 0..j-s+1 and, in each
    later block r = 2..s, entry j-s+r."""
    j = torch.arange(width)[:, None]
    i = torch.arange(width)[None, :]
    return torch.cat([i <= j - depth + 1] + [i == j - depth + r for r in range(2, depth + 1)], dim=1)


def reference(query, key, value, scaling):
    depth = key.shape[2] // query.shape[2]
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=dense_mask(query.shape[2], depth), scale=scaling)
    return out.transpose(1, 2)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_structured_attention_equals_the_dense_mask_in_values_and_gradients(monkeypatch, depth):
    monkeypatch.setattr(ttt_attention, "CHUNK", 16)  # several chunks, the last one partial
    width, generator = 37, torch.Generator().manual_seed(depth)
    query = torch.randn(2, 4, width, 8, generator=generator, requires_grad=True)  # 4 query heads over 2 key heads
    key = torch.randn(2, 2, depth * width, 8, generator=generator, requires_grad=True)
    value = torch.randn(2, 2, depth * width, 8, generator=generator, requires_grad=True)
    ours, _ = ttt_attention.ttt_attention(None, query, key, value, None, scaling=0.35)
    theirs = reference(query, key, value, 0.35)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    upstream = torch.randn(ours.shape, generator=generator)
    ours_grads = torch.autograd.grad((ours * upstream).sum(), (query, key, value))
    theirs_grads = torch.autograd.grad((theirs * upstream).sum(), (query, key, value))
    for a, b in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_the_unrolled_pass_runs_the_structured_attention_and_matches_sdpa_under_the_dense_mask(monkeypatch):
    """The head's own layer, through the cache the unrolled pass builds: the same outputs at every depth as the
    same layer under SDPA with the dense mask; and the layer is back on SDPA afterwards (serving)."""
    monkeypatch.setattr(ttt_attention, "CHUNK", 8)
    target = tiny_llama(seed=3, vocab_size=64, layers=2, fast=False)
    torch.manual_seed(0)
    head = EagleHead(target, HeadConfig.for_target(target, "tiny", 48), torch.arange(48)).eval()
    tokens = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(1))
    features = torch.randn(2, 21, target.config.hidden_size, generator=torch.Generator().manual_seed(2))
    depth = 3
    with torch.no_grad():
        ours = unrolled_pass(head, tokens, features, depth)
        width = tokens.shape[1] - 2
        positions = torch.arange(width)[None].expand(2, -1)
        cache, feature_in, theirs = head.new_cache(), head.input_features(features[:, :width]), []
        for s in range(1, depth + 1):
            additive = torch.zeros(width, s * width).masked_fill(~dense_mask(width, s), torch.finfo(torch.float32).min)
            predicted = head(feature_in, tokens[:, 1 : width + 1], positions, cache, additive[None, None])
            theirs.append(predicted)
            feature_in = torch.cat([torch.zeros_like(predicted[:, :1]), predicted[:, :-1]], dim=1)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert head.layer_config._attn_implementation == "sdpa"
