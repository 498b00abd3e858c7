"""An experiment, not a serving path (status in bench/experiments/README.md): the embedded target's pass as an
AOTInductor package, compiled once per machine and loaded by any later process, which is what torch.compile
(compiled.py) lacks.

    python3 -m bench.experiments.aoti compile [--static]  # export and compile (minutes, both cores); --static: 1 token
    python3 -m bench.experiments.aoti run [--static]      # in a fresh process: load time, ms/token, T(n)/T(1), identity

The pass takes the KV cache as two tensors it writes in place (index_copy_ at explicit slots), a boolean
[1, 1, n, L] mask and explicit positions, so rollback, KV compaction and tree masks would stay tensor
operations in Python; it returns the logits and the outputs of layers 2, 15, 27 and the last (what an
EAGLE head reads). transformers' own export wrapper (integrations/executorch.py) hides the cache in
buffers and takes no mask, hence this one. Compiled under torch.no_grad with freezing and max-autotune
(the C++ GEMM template competes with oneDNN's packed linear per shape).

Time it with nothing else running: a background job at nice 19 still slows 2-thread passes by 10-25% through
OpenMP barriers. Where the gap to compiled.py's pass is likely to be: the cache length L is dynamic here
(attention over keys[:, :, :L]), where compiled.py (gpt-fast's way) attends over the whole static cache with a
mask, so every shape is static; then the in-place cache writes and, for dynamic n, the GEMM template tuned at the
example width. torch.compile of this module with dynamic=False recompiles at every new L: do not time it that way.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from specdec_core.models import load_stock
from specdec_core.sources import EMBEDDED_ID, cache_dir

LONGEST_CACHE = 512
WIDEST = 17  # tokens a pass: 1 for plain decoding, up to k + 1 = 17 to verify a draft
FEATURE_LAYERS = (2, 15, 27)


class ExplicitCachePass(nn.Module):
    """One pass of a Llama-family model over n new tokens with the cache as inputs (written in place)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model, self.lm_head = model.model, model.lm_head
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads

    def forward(self, input_ids, position_ids, slots, mask, keys, values):
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb(x, position_ids)
        n, length = input_ids.shape[1], mask.shape[-1]
        features = []
        for i, layer in enumerate(self.model.layers):
            attention = layer.self_attn
            h = layer.input_layernorm(x)
            q = attention.q_proj(h).view(1, n, self.heads, self.head_dim).transpose(1, 2)
            k = attention.k_proj(h).view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attention.v_proj(h).view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            keys[i].index_copy_(2, slots, k)
            values[i].index_copy_(2, slots, v)
            o = F.scaled_dot_product_attention(q, keys[i][:, :, :length], values[i][:, :, :length], attn_mask=mask,
                                               enable_gqa=True)
            x = x + attention.o_proj(o.transpose(1, 2).reshape(1, n, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            if i in FEATURE_LAYERS:
                features.append(x)
        return self.lm_head(self.model.norm(x)), torch.cat(features + [x], dim=-1)


def empty_cache(model: PreTrainedModel) -> tuple[torch.Tensor, torch.Tensor]:
    c = model.config
    shape = (c.num_hidden_layers, 1, c.num_key_value_heads, LONGEST_CACHE, c.hidden_size // c.num_attention_heads)
    return torch.zeros(shape), torch.zeros(shape)


def pass_inputs(ids: list[int], start: int, keys: torch.Tensor, values: torch.Tensor) -> tuple:
    """Inputs for n tokens after `start` cached ones, causal."""
    n = len(ids)
    mask = torch.ones(n, start + n, dtype=torch.bool).tril(diagonal=start)[None, None]
    return torch.tensor([ids]), torch.arange(start, start + n)[None], torch.arange(start, start + n), mask, keys, values


def compile_package(model: PreTrainedModel, path: str, static: bool) -> dict:
    module = ExplicitCachePass(model).eval()
    keys, values = empty_cache(model)
    example = pass_inputs([5] if static else [5, 6, 7, 8], 10, keys, values)  # n = 1 would be fixed as a constant
    # L = the whole cache would be a special case: hence LONGEST_CACHE - 1
    n, length = Dim("n", min=1, max=WIDEST), Dim("L", min=2, max=LONGEST_CACHE - 1)
    if static:
        dynamic = (None, None, None, {3: length}, None, None)
    else:
        dynamic = ({1: n}, {1: n}, {0: n}, {2: n, 3: length}, None, None)
    with torch.no_grad():  # not inference_mode: freezing folds parameters
        started = time.perf_counter()
        program = torch.export.export(module, example, dynamic_shapes=dynamic, strict=False)
        exported = time.perf_counter() - started
        torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs={
            "freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"})
    return {"export_s": round(exported, 1), "compile_s": round(time.perf_counter() - started - exported, 1),
            "package_mb": os.path.getsize(path) // 2**20}


def greedy(run, prompt: list[int], tokens: int, keys, values) -> tuple[list[int], list[float]]:
    """Greedy tokens and the seconds of each one-token pass."""
    for start in range(0, len(prompt), WIDEST - 1):
        logits, _ = run(*pass_inputs(prompt[start : start + WIDEST - 1], start, keys, values))
    out, seconds = [int(logits[0, -1].argmax())], []
    for _ in range(tokens - 1):
        started = time.perf_counter()
        logits, _ = run(*pass_inputs([out[-1]], len(prompt) + len(out) - 1, keys, values))
        seconds.append(time.perf_counter() - started)
        out.append(int(logits[0, -1].argmax()))
    return out, seconds


def run_package(model: PreTrainedModel, path: str, static: bool) -> dict:
    started = time.perf_counter()
    package = torch._inductor.aoti_load_package(path)
    loaded = time.perf_counter() - started
    eager = ExplicitCachePass(model).eval()
    run = (lambda *a: package(*a) if a[0].shape[1] == 1 else eager(*a)) if static else package
    prompt = list(range(100, 140))
    with torch.no_grad():
        ours, seconds = greedy(run, prompt, 48, *empty_cache(model))
        generated = model.generate(torch.tensor([prompt]), max_new_tokens=48, do_sample=False)
        reference = generated[0, len(prompt):].tolist()
        keys, values = empty_cache(model)
        widths = {}
        for width in (1,) if static else (1, 2, 5, 9, 17):
            times = []
            for _ in range(6):
                started = time.perf_counter()
                run(*pass_inputs(list(range(200, 200 + width)), 100, keys, values))
                times.append(time.perf_counter() - started)
            widths[width] = min(times)
    return {"load_s": round(loaded, 1), "ms_per_token_median": round(1000 * sorted(seconds)[len(seconds) // 2], 1),
            "identical_to_generate": ours == reference,
            "T(n)/T(1)": {w: round(t / widths[1], 2) for w, t in widths.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=["compile", "run"])
    parser.add_argument("--static", action="store_true", help="one token a pass (plain decoding's)")
    args = parser.parse_args()
    model = load_stock(EMBEDDED_ID, torch.float32).eval()
    folder = cache_dir() / "aoti"
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / ("pass-1-token.pt2" if args.static else "pass-1-to-17-tokens.pt2"))
    stage = compile_package if args.stage == "compile" else run_package
    result = stage(model, path, args.static)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
