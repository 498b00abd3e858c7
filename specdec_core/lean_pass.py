"""A lean forward pass for Llama-family models on a CPU: the same modules and weights, the same ops in
the same order, without transformers' per-call machinery; q/k/v and gate/up each one matrix product.

Why by hand: on a small CPU, transformers' forward spends a large share of a decode step outside matrix
products: the output-capturing decorators, mask construction, the attention-function dispatch and
~2,800 small ops of 30 layers (SmolLM2-135M). transformers offers no leaner path short of
torch.compile, whose compile takes minutes per shape on a 2-core CPU (bench/experiments/compiled.py;
bench/RESULTS.md, 2026-12-03, AMD EPYC (AVX-512)). Only the orchestration is written here: the
norms, the rotary table, the activation, the cache and scaled_dot_product_attention are
transformers' and torch's own, called in transformers' order, so the logits are those of the stock
forward (tests/specdec_core/test_lean_pass.py holds it to that).

Fusing: q, k and v read the same input, as do gate and up; one product over the stacked weights
reads the same bytes in fewer, larger kernel calls, which are faster (bench/RESULTS.md, 2026-12-03,
AMD EPYC (AVX-512)), and every output element is the same dot product as unfused. The fused layers
replace the separate ones, so a fused model runs only here. The EAGLE head's decoder layers, served,
take the same fusion and lean_layer (drafters/eagle_head.py).
"""

from __future__ import annotations

import logging
import os
import types

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import rotate_half

from .static_pass import head_dim
from .tree import causal_mask

log = logging.getLogger(__name__)

# model types whose decoder layer is Llama's: pre-norm, rotary on q and k, gated MLP, no extra norms
LLAMA_LIKE = frozenset({"llama"})


def lean_unsupported(model: PreTrainedModel) -> str | None:
    """Why model cannot take the lean pass, or None when it can."""
    if os.environ.get("SPECDEC_LEAN", "1") == "0":
        return "turned off (SPECDEC_LEAN=0)"
    config = model.config
    if config.model_type not in LLAMA_LIKE:
        return f"model type '{config.model_type}' (lean pass: {', '.join(sorted(LLAMA_LIKE))})"
    if next(model.parameters()).device.type != "cpu":
        return "not on a CPU"
    if config._attn_implementation != "sdpa":
        return f"attention '{config._attn_implementation}' (lean pass: sdpa)"
    return None


def _stacked(parts: list[torch.nn.Linear]) -> torch.nn.Linear:
    biases = [part.bias for part in parts]
    fused = torch.nn.Linear(
        parts[0].in_features,
        sum(p.out_features for p in parts),
        bias=biases[0] is not None,
        device="meta",
        dtype=parts[0].weight.dtype,
    )
    fused.weight = torch.nn.Parameter(torch.cat([p.weight.detach() for p in parts]), requires_grad=False)
    if fused.bias is not None:
        fused.bias = torch.nn.Parameter(torch.cat([b.detach() for b in biases]), requires_grad=False)
    return fused


def fuse_layers(layers) -> None:
    """Replaces each Llama decoder layer's q/k/v and gate/up projections by one stacked Linear each, in place
    (dense weights needed: before cpu_kernels packs or quantizes them). The target's layers and the EAGLE
    head's take the same fusion and then the same lean_layer."""
    for layer in layers:
        attention, mlp = layer.self_attn, layer.mlp
        attention.qkv_proj = _stacked([attention.q_proj, attention.k_proj, attention.v_proj])
        mlp.gate_up_proj = _stacked([mlp.gate_proj, mlp.up_proj])
        del attention.q_proj, attention.k_proj, attention.v_proj, mlp.gate_proj, mlp.up_proj


def is_fused(layer: torch.nn.Module) -> bool:
    return hasattr(layer.self_attn, "qkv_proj")


def fuse_projections(model: PreTrainedModel) -> bool:
    """Fuses the model's layers (fuse_layers); returns whether model now takes the lean pass."""
    reason = lean_unsupported(model)
    if reason:
        log.info(
            "Lean forward pass not used for %s: %s; transformers' forward runs.", model.config.name_or_path, reason
        )
        return False
    fuse_layers(model.model.layers)
    model.forward = types.MethodType(_forward_refused, model)  # transformers' forward reads the removed layers
    return True


def _forward_refused(model: PreTrainedModel, *args, **kwargs):
    raise TypeError(
        "This model's layers are fused for the lean pass: run it through specdec_core.lean_pass.run_pass "
        "(kv_cache.CachedModel does), or load it with load_model(..., for_generate=True) for transformers' "
        "forward and generate."
    )


def is_lean(model: PreTrainedModel) -> bool:
    """Whether model's layers are fused (fuse_projections), itself or as a truncated copy sharing them."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return bool(layers) and is_fused(layers[0])


def run_pass(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    cache: Cache,
    position_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    logits_to_keep: int = 1,
    feature_layers: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The one way a loaded model runs a pass: the lean one for a fused model, else transformers' forward.
    Same arguments and results as lean_forward."""
    if is_lean(model):
        layers = tuple(i % model.config.num_hidden_layers for i in feature_layers)
        return lean_forward(model, input_ids, cache, position_ids, attention_mask, logits_to_keep, layers)
    selected = hidden_state_indices(model, feature_layers)
    out = model(
        input_ids=input_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=logits_to_keep,
        position_ids=position_ids,
        attention_mask=attention_mask,
        output_hidden_states=selected or None,
    )
    return out.logits, torch.cat([out.hidden_states[i] for i in selected], dim=-1) if selected else None


def hidden_state_indices(model: PreTrainedModel, layers: tuple[int, ...]) -> list[int]:
    """transformers' indices of the outputs of the numbered layers (from 0; -1 the last) among a forward's
    hidden states, which it numbers from the embeddings' (0): layer i's output is i + 1. Its tuple holds None
    where a state was not selected. The last layer's is then its output, not the final norm's, as lean_forward's."""
    if layers:
        model.config.tie_last_hidden_states = False
    return [i % model.config.num_hidden_layers + 1 for i in layers]


def lean_forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    cache: Cache,
    position_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    logits_to_keep: int = 1,
    feature_layers: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One pass of a fused model over input_ids [1, T]: (logits [1, logits_to_keep, V], the outputs of the
    layers numbered in feature_layers (ascending, from 0), side by side [1, T, len(feature_layers) * H], or
    None when there are none; the last layer's output is taken before the final norm). attention_mask: a 4D bool mask
    (a draft tree) used with position_ids as given; without one, positions continue the cache causally."""
    inner, config = model.model, model.config
    new, cached = input_ids.shape[1], cache.get_seq_length()
    hidden = inner.embed_tokens(input_ids)
    if position_ids is None:
        position_ids = (torch.arange(new, device=input_ids.device) + cached)[None]
    if attention_mask is None and new > 1 and cached:
        attention_mask = causal_mask(new, cached)[None, None].to(input_ids.device)
    cos, sin = (table[:, None] for table in inner.rotary_emb(hidden, position_ids))
    features = []
    for index, layer in enumerate(inner.layers):
        hidden = lean_layer(layer, config, hidden, cos, sin, cache, index, attention_mask)
        if index in feature_layers:
            features.append(hidden)
    logits = model.lm_head(inner.norm(hidden[:, -logits_to_keep:]))
    return logits, torch.cat(features, dim=-1) if features else None


def lean_layer(
    layer: torch.nn.Module,
    config,
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: Cache,
    index: int,
    attention_mask: torch.Tensor | None,
) -> torch.Tensor:
    """One fused Llama decoder layer over hidden [1, T, H] (cos, sin: [1, 1, T, head_dim]; attention_mask:
    bool or additive, [1, 1, T, cached + T], or None for causal), its keys and values appended to cache
    entry `index`: transformers' ops in transformers' order, without its call machinery."""
    attention, mlp = layer.self_attn, layer.mlp
    new = hidden.shape[1]
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dim = head_dim(config)
    qkv = attention.qkv_proj(layer.input_layernorm(hidden)).view(1, new, heads + 2 * kv_heads, dim).transpose(1, 2)
    rotated = qkv[:, : heads + kv_heads]  # q and k take the same rotation: one set of ops for both
    rotated = rotated * cos + rotate_half(rotated) * sin
    keys, values = cache.update(rotated[:, heads:], qkv[:, heads + kv_heads :], index)
    # Grouped heads inside the kernel, with or without a mask: transformers repeats the keys and values
    # for a masked pass instead, the same numbers (tests) at about twice the attention's cost, which grows
    # with the context.
    out = F.scaled_dot_product_attention(
        rotated[:, :heads],
        keys,
        values,
        attn_mask=attention_mask,
        scale=attention.scaling,
        is_causal=attention_mask is None and new > 1,
        enable_gqa=True,
    )
    hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(1, new, -1))
    gate, up = mlp.gate_up_proj(layer.post_attention_layernorm(hidden)).chunk(2, dim=-1)
    return hidden + mlp.down_proj(mlp.act_fn(gate) * up)
