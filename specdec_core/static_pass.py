"""A Llama-family pass with every shape static, for ahead-of-time compilation (compiled_pass.py): a fixed number
of tokens per pass (the width), keys and values in one buffer per layer and per kind, of a fixed length, written
in place at the pass's slots, and attention over the whole buffer with a boolean mask, as gpt-fast's model does.

Why these shapes: a compiled graph is specialised to its shapes, so a pass whose cache grew every step would need
a new graph every step. Weights are stored stacked (q/k/v, gate/up, as the lean pass fuses them) and transposed
([in, out]: x @ w), the layout inductor's C++ GEMM template packs when freezing folds them into the graph. The ops
are transformers' (norms, rotary table, activation) and torch's scaled_dot_product_attention, in the lean pass's
order; tests/specdec_core/test_compiled_pass.py holds the compiled pass to the lean one's greedy tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import rotate_half

from .tree import attention_mask, positions


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _transposed(*linears: nn.Linear) -> nn.Parameter:
    """The linears' weights stacked and stored [in, out]: x @ w."""
    return nn.Parameter(torch.cat([lin.weight for lin in linears]).t().contiguous().detach(), requires_grad=False)


class StaticPass(nn.Module):
    """One pass of a Llama-family model with stock layers (models.load_stock) over `width` tokens behind caches of a
    fixed length. Returns logits [1, width, V] and, where feature_layers names any (from 0, ascending), their
    outputs side by side [1, width, len(feature_layers) * H], the last layer's before the final norm. Holds its own
    stacked, transposed copies of the weights; the model is left as it was."""

    def __init__(self, model: PreTrainedModel, feature_layers: tuple[int, ...] = ()) -> None:
        super().__init__()
        inner, config = model.model, model.config
        layers = inner.layers
        self.embed, self.norm, self.rotary = inner.embed_tokens, inner.norm, inner.rotary_emb
        self.input_norms = nn.ModuleList(layer.input_layernorm for layer in layers)
        self.post_attention_norms = nn.ModuleList(layer.post_attention_layernorm for layer in layers)
        attentions, mlps = [layer.self_attn for layer in layers], [layer.mlp for layer in layers]
        self.qkv = nn.ParameterList(_transposed(a.q_proj, a.k_proj, a.v_proj) for a in attentions)
        self.o = nn.ParameterList(_transposed(a.o_proj) for a in attentions)
        self.gate_up = nn.ParameterList(_transposed(m.gate_proj, m.up_proj) for m in mlps)
        self.down = nn.ParameterList(_transposed(m.down_proj) for m in mlps)
        self.head = _transposed(model.lm_head)
        self.act_fn, self.scaling = mlps[0].act_fn, attentions[0].scaling
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = head_dim(config)
        self.feature_layers = tuple(i % config.num_hidden_layers for i in feature_layers)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        slots: torch.Tensor,
        mask: torch.Tensor,
        kv: list[torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        """input_ids, position_ids [1, width]; slots [width]: where each token's keys and values go; mask [1, 1,
        width, length] bool, True = attend; kv: keys and values of each layer in turn, [1, kv_heads, length,
        head_dim] each, written in place."""
        n, heads, kv_heads = input_ids.shape[1], self.heads, self.kv_heads
        x = self.embed(input_ids)
        cos, sin = (table[:, None] for table in self.rotary(x, position_ids))
        features = []
        for index in range(len(self.qkv)):
            qkv = (self.input_norms[index](x) @ self.qkv[index]).view(1, n, heads + 2 * kv_heads, self.head_dim)
            qkv = qkv.transpose(1, 2)
            rotated = qkv[:, : heads + kv_heads]  # q and k take the same rotation
            rotated = rotated * cos + rotate_half(rotated) * sin
            keys, values = kv[2 * index], kv[2 * index + 1]
            keys.index_copy_(2, slots, rotated[:, heads:])
            values.index_copy_(2, slots, qkv[:, heads + kv_heads :])
            out = F.scaled_dot_product_attention(
                rotated[:, :heads], keys, values, attn_mask=mask, scale=self.scaling, enable_gqa=True
            )
            x = x + out.transpose(1, 2).reshape(1, n, -1) @ self.o[index]
            gate, up = (self.post_attention_norms[index](x) @ self.gate_up[index]).chunk(2, dim=-1)
            x = x + (self.act_fn(gate) * up) @ self.down[index]
            if index in self.feature_layers:
                features.append(x)
        logits = self.norm(x) @ self.head
        return (logits, torch.cat(features, dim=-1)) if features else (logits,)


def static_inputs(
    tokens: list[int], cached: int, width: int, length: int, parents: tuple[int, ...] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, position_ids, slots, mask) for len(tokens) <= width tokens after `cached` ones: causal, or with
    the last len(parents) tokens a draft tree (tree.py). Padded to width: the padding rows repeat the last token's
    position and see what it sees; their keys and values land past the real ones, where the next pass overwrites
    them. Needs cached + width <= length."""
    n = len(tokens)
    if parents:
        tail = n - len(parents)
        real_mask, real_positions = attention_mask(parents, tail, cached)[0, 0], positions(parents, tail, cached)[0]
    else:
        real_mask = torch.ones(n, cached + n, dtype=torch.bool).tril(cached)
        real_positions = torch.arange(cached, cached + n)
    mask = torch.zeros(width, length, dtype=torch.bool)
    mask[:n, : cached + n] = real_mask
    mask[n:, : cached + n] = real_mask[-1]
    position_ids = torch.cat([real_positions, real_positions[-1].repeat(width - n)])
    input_ids = torch.tensor([tokens + [tokens[-1]] * (width - n)])
    return input_ids, position_ids[None], torch.arange(cached, cached + width), mask[None, None]
