"""An experiment, not a serving path (status in bench/experiments/README.md): the embedded target's pass as an
AOTInductor package per pass width, every shape static as in gpt-fast: keys and values in one buffer per layer
and per kind, of a fixed length, passed in and written in place; attention over the whole buffer with a boolean
mask; weights stored transposed and folded in by freezing, so that inductor's C++ GEMM template packs them. A
package compiles once per machine (kept by specdec_core/artefacts.py, checked against its manifest before each
load) and loads in a second in any later process, which torch.compile cannot give
here: its graph cache refuses graphs holding MKL-packed weights ("mkldnn tensors unpickleable"), and its
compile (~90 s, most of it rendering 121 GEMM templates) would run again in every process.

    python3 -m bench.experiments.aoti compile --width 1 [--length 1024]   # minutes, both cores
    python3 -m bench.experiments.aoti run [--length 1024]   # a new process: each compiled width, against the lean pass

Time it with nothing else running. What made the static pass fast: one buffer per layer (a 5-D cache of all
layers written through views took 97 ms a pass against 40 with per-layer buffers, 2026-12-07, AVX2 EPYC).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import rotate_half

from bench.bandwidth import read_bandwidth, weight_bytes
from specdec_core.artefacts import artefact_path, artefact_problem, cached_artefact
from specdec_core.embedded import EMBEDDED_REQUIREMENT
from specdec_core.kv_cache import CachedModel
from specdec_core.models import load_model, load_stock
from specdec_core.sources import EMBEDDED_ID

PACKAGE_WIDTHS = range(1, 18)  # the widths `run` looks for; `compile` takes any


def _transposed(*linears: nn.Linear) -> nn.Parameter:
    """The linears' weights stacked and stored [in, out]: x @ w."""
    return nn.Parameter(torch.cat([lin.weight for lin in linears]).t().contiguous().detach(), requires_grad=False)


class StaticPass(nn.Module):
    """One pass of a Llama-family model over n tokens (n fixed per package) behind a static cache."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        inner, config = model.model, model.config
        self.embed, self.norm, self.rotary, self.layers = inner.embed_tokens, inner.norm, inner.rotary_emb, inner.layers
        for layer in self.layers:
            attention, mlp = layer.self_attn, layer.mlp
            attention.qkv = _transposed(attention.q_proj, attention.k_proj, attention.v_proj)
            attention.o = _transposed(attention.o_proj)
            mlp.gate_up, mlp.down = _transposed(mlp.gate_proj, mlp.up_proj), _transposed(mlp.down_proj)
            del attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj
            del mlp.gate_proj, mlp.up_proj, mlp.down_proj
        self.head = _transposed(model.lm_head)
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.hidden_size // self.heads

    def forward(self, input_ids, position_ids, slots, mask, kv: list[torch.Tensor]) -> torch.Tensor:
        n, heads, kv_heads = input_ids.shape[1], self.heads, self.kv_heads
        x = self.embed(input_ids)
        cos, sin = (table[:, None] for table in self.rotary(x, position_ids))
        for index, layer in enumerate(self.layers):
            attention, mlp = layer.self_attn, layer.mlp
            qkv = layer.input_layernorm(x) @ attention.qkv
            qkv = qkv.view(1, n, heads + 2 * kv_heads, self.head_dim).transpose(1, 2)
            rotated = qkv[:, : heads + kv_heads]
            rotated = rotated * cos + rotate_half(rotated) * sin
            keys, values = kv[2 * index], kv[2 * index + 1]
            keys.index_copy_(2, slots, rotated[:, heads:])
            values.index_copy_(2, slots, qkv[:, heads + kv_heads :])
            out = F.scaled_dot_product_attention(
                rotated[:, :heads], keys, values, attn_mask=mask, scale=attention.scaling, enable_gqa=True
            )
            x = x + out.transpose(1, 2).reshape(1, n, -1) @ attention.o
            gate, up = (layer.post_attention_layernorm(x) @ mlp.gate_up).chunk(2, dim=-1)
            x = x + (mlp.act_fn(gate) * up) @ mlp.down
        return self.norm(x) @ self.head


def kv_buffers(model: PreTrainedModel, length: int) -> list[torch.Tensor]:
    config = model.config
    shape = (1, config.num_key_value_heads, length, config.hidden_size // config.num_attention_heads)
    return [torch.zeros(shape) for _ in range(2 * config.num_hidden_layers)]


def pass_inputs(tokens: list[int], start: int, width: int, length: int) -> tuple:
    """Inputs for len(tokens) <= width tokens after `start` cached ones, causal, padded to width (the padding rows'
    keys and values land past the real ones, where the next pass overwrites them)."""
    n = len(tokens)
    mask = torch.zeros(1, 1, width, length, dtype=torch.bool)
    for row in range(width):
        mask[0, 0, row, : start + min(row, n - 1) + 1] = True
    slots = torch.arange(start, start + width)
    return torch.tensor([tokens + [0] * (width - n)]), slots[None], slots, mask


def package_identity(width: int, length: int) -> dict:
    return {"model": EMBEDDED_REQUIREMENT, "pass": "StaticPass", "width": width, "length": length}


def compile_package(width: int, length: int) -> dict:
    """The package for width, from the artefact cache where it is whole and was built here, else compiled."""
    model = load_stock(EMBEDDED_ID, torch.float32)
    module, times = StaticPass(model).eval(), {}

    def build(path: Path) -> None:
        with torch.no_grad():  # not inference_mode: freezing folds parameters
            started = time.perf_counter()
            example = (*pass_inputs([5] * width, 10, width, length), kv_buffers(model, length))
            program = torch.export.export(module, example, strict=False)
            exported = time.perf_counter()
            torch._inductor.aoti_compile_and_package(
                program, package_path=str(path), inductor_configs={"freezing": True, "max_autotune": True}
            )
        times.update(export_s=round(exported - started, 1), compile_s=round(time.perf_counter() - exported, 1))

    package = cached_artefact("static-pass", package_identity(width, length), build)
    return {"width": width, "package": package.note, **times, "package_mb": package.path.stat().st_size >> 20}


def run_packages(length: int, tokens: int = 32) -> dict:
    """Every compiled width in a fresh process: load time; greedy decoding with the 1-token package against the lean
    pass, one step of each in turn (paired), and whether the tokens are the same; each width's pass time."""
    bandwidths = [read_bandwidth()]
    model = load_stock(EMBEDDED_ID, torch.float32)
    started = time.perf_counter()
    packages = {}
    for width in PACKAGE_WIDTHS:  # those compiled here, whole: checked against their manifests before loading
        identity = package_identity(width, length)
        path = artefact_path("static-pass", identity)
        if artefact_problem(path, identity) is None:
            packages[width] = torch._inductor.aoti_load_package(str(path))
    if 1 not in packages:
        raise SystemExit("No whole 1-token package compiled on this machine: run `compile --width 1` first.")
    loaded = time.perf_counter() - started
    eager, kv, lean = StaticPass(model).eval(), kv_buffers(model, length), CachedModel(load_model(EMBEDDED_ID).model)
    prompt = list(range(100, 260))
    with torch.no_grad():
        logits, lean_logits = eager(*pass_inputs(prompt, 0, len(prompt), length), kv)[0, -1], lean.forward(prompt)[-1]
        compiled, reference, seconds, lean_seconds = [], [], [], []
        for step in range(tokens):
            compiled.append(int(logits.argmax()))
            reference.append(int(lean_logits.argmax()))
            begun = time.perf_counter()
            logits = packages[1](*pass_inputs([compiled[-1]], len(prompt) + step, 1, length), kv)[0, 0]
            seconds.append(time.perf_counter() - begun)
            begun = time.perf_counter()
            lean_logits = lean.forward([reference[-1]])[-1]
            lean_seconds.append(time.perf_counter() - begun)
        by_width = {}
        for width, package in packages.items():
            times = []
            for _ in range(9):
                begun = time.perf_counter()
                package(*pass_inputs(list(range(200, 200 + width)), len(prompt), width, length), kv)
                times.append(time.perf_counter() - begun)
            by_width[width] = statistics.median(times)
    bandwidths.append(read_bandwidth())
    bound_ms = 1000 * weight_bytes(model) / statistics.median(bandwidths)
    return {
        "bandwidth_gb_s": [round(b / 1e9, 1) for b in bandwidths],
        "bound_ms": round(bound_ms, 1),
        "compiled_share_of_bound": round(bound_ms / (1000 * statistics.median(seconds)), 2),
        "lean_share_of_bound": round(bound_ms / (1000 * statistics.median(lean_seconds)), 2),
        "load_s": round(loaded, 1),
        "compiled_ms_per_token": round(1000 * statistics.median(seconds), 1),
        "lean_ms_per_token": round(1000 * statistics.median(lean_seconds), 1),
        "identical": compiled == reference,
        "ms_by_width": {w: round(1000 * t, 1) for w, t in by_width.items()},
        "T(n)/T(1)": {w: round(t / by_width[1], 2) for w, t in by_width.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=["compile", "run"])
    parser.add_argument("--width", type=int, default=1, help="compile: tokens a pass")
    parser.add_argument("--length", type=int, default=1024, help="positions the static cache holds")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("SPECDEC_THREADS", "2")))
    result = compile_package(args.width, args.length) if args.stage == "compile" else run_packages(args.length)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
