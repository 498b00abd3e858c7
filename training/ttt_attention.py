"""The head layer's attention in the unrolled training pass (training-time test), computed where it is not masked.

At depth s the unrolled pass (train_head.unrolled_pass) feeds T entries whose keys are the s depth blocks
side by side, [B, Hkv, s * T, D]. Entry j sees the real block's entries 0..j-s+1 and, in each block
r = 2..s, the one entry j-s+r (its own chain of guesses). SDPA with that mask as a dense [T, s * T] matrix
computes every masked score as well: 10 T^2 scores over the four depths where 2 T^2 are needed, 40% of a
training step on 1,800-token sequences (2-core AMD EPYC, bfloat16). Here the real block is computed in
query chunks up to each chunk's last visible key, the other blocks as one dot product per entry, and one
softmax covers both.

Written by hand because no library kernel takes this structure on a CPU: SDPA's causal path cannot add the
per-entry keys and does not return the log-sum-exp with a gradient to merge them; flex_attention needs
torch.compile. Registered with transformers' AttentionInterface, so the head's own LlamaDecoderLayer runs
it (unrolled_attention); serving keeps SDPA. Tested against the dense-mask SDPA, values and gradients.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

NAME = "eagle_training_time_test"
CHUNK = 256  # queries per block of the real part: fewer wasted scores against more Python steps


def ttt_attention(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query [B, H, T, D]; key, value [B, Hkv, s * T, D] (the depth blocks); returns [B, T, H, D] as
    transformers' attention functions do. attention_mask is ignored: the structure above is the mask."""
    width = query.shape[2]
    depth = key.shape[2] // width
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # grouped-query heads
    own_keys, own_values, own_valid = _chain_entries(key, value, width, depth)
    outputs = []
    for start in range(0, width, CHUNK):
        end = min(start + CHUNK, width)
        q = query[:, :, start:end]
        visible = max(0, end - depth + 1)  # real keys 0..j-depth+1 for the chunk's last entry j = end - 1
        j = torch.arange(start, end, device=query.device)[:, None]
        real_scores = (q @ key[:, :, :visible].transpose(-1, -2)).float() * scaling
        real_scores = real_scores.masked_fill(
            torch.arange(visible, device=query.device)[None] > j - depth + 1, float("-inf")
        )
        # float32 for these few products: under bfloat16 autocast an elementwise product is rounded before the sum
        chain_scores = (q[:, :, :, None].float() * own_keys[:, :, start:end].float()).sum(
            -1
        ) * scaling  # [B, H, C, s - 1]
        chain_scores = chain_scores.masked_fill(~own_valid[start:end], float("-inf"))
        weights = torch.cat([real_scores, chain_scores], dim=-1).softmax(-1).to(value.dtype)
        out = weights[..., :visible] @ value[:, :, :visible]
        out = out + (weights[..., visible:, None].float() * own_values[:, :, start:end].float()).sum(-2).to(out.dtype)
        outputs.append(out)
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def _chain_entries(
    key: torch.Tensor, value: torch.Tensor, width: int, depth: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each entry j, the one key and value it sees in each block r = 2..depth (entry j - depth + r),
    stacked [B, H, T, depth - 1, D], and where that entry exists [T, depth - 1]."""
    keys, values, valid = [], [], []
    for r in range(2, depth + 1):
        shift = depth - r  # entry j sees entry j - shift of block r
        block = slice((r - 1) * width, r * width)
        keys.append(F.pad(key[:, :, block], (0, 0, shift, 0))[:, :, :width])
        values.append(F.pad(value[:, :, block], (0, 0, shift, 0))[:, :, :width])
        valid.append(torch.arange(width, device=key.device) >= shift)
    if depth == 1:
        empty = key.new_zeros(*key.shape[:2], width, 0, key.shape[-1])
        return empty, empty, torch.zeros(width, 0, dtype=torch.bool, device=key.device)
    return torch.stack(keys, dim=3), torch.stack(values, dim=3), torch.stack(valid, dim=1)


AttentionInterface.register(NAME, ttt_attention)


@contextmanager
def unrolled_attention(layer_config) -> Iterator[None]:
    """The head's layer runs ttt_attention inside the block (it reads the config at every call), SDPA after."""
    before = layer_config._attn_implementation
    layer_config._attn_implementation = NAME
    try:
        yield
    finally:
        layer_config._attn_implementation = before
