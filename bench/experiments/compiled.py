"""An experiment, not a serving path (status in bench/experiments/README.md): how fast plain decoding runs
when inductor compiles the whole one-token pass (gpt-fast's recipe on a CPU: a static KV cache,
torch.compile with freezing and max-autotune, whose C++ GEMM template replaces oneDNN's matrix-vector
products), what the compilation costs, and whether the tokens stay the same.

    python3 -m bench.experiments.compiled [--prompts 2] [--tokens 64] [--repeats 3]   # minutes: it compiles first

Why it is not in the engine: inductor's on-disk graph cache refuses graphs that hold packed (mkldnn) weights
("mkldnn tensors unpickleable"), so every new process compiles again from scratch, and without packing the
template is not used and the pass is slower than ours. The served path compiles ahead of time instead, one
AOTInductor package per width bucket (specdec_core/compiled_pass.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch._inductor.config as inductor_config
from transformers import PreTrainedModel, StaticCache


def compiled_greedy(model: PreTrainedModel, mode: str | None = "max-autotune", cache_length: int = 512):
    """A greedy decoder whose one-token pass is compiled once; returns (decode, compile_seconds).

    decode(prompt_ids, tokens, stops) -> generated ids, ending at a stop token or after `tokens`. model
    must be a separate copy with dense weights (models.load_stock): freezing folds them into the graph."""
    step = torch.compile(model.forward, mode=mode, dynamic=False)
    # one cache for every call: its buffers are graph inputs
    cache = StaticCache(config=model.config, max_cache_len=cache_length)

    @torch.no_grad()  # not inference_mode: freezing needs parameters it can fold
    def decode(prompt_ids: list[int], tokens: int, stops: frozenset[int] = frozenset()) -> list[int]:
        if len(prompt_ids) + tokens > cache_length:
            raise ValueError(f"{len(prompt_ids)} prompt + {tokens} new tokens exceed the static cache ({cache_length})")
        cache.reset()
        logits = model(input_ids=torch.tensor([prompt_ids]), cache=cache, use_cache=True, logits_to_keep=1).logits
        out = [int(logits[0, -1].argmax())]
        with inductor_config.patch(freezing=True):
            for position in range(len(prompt_ids), len(prompt_ids) + tokens - 1):
                if out[-1] in stops:
                    break
                logits = step(input_ids=torch.tensor([[out[-1]]]), cache=cache, use_cache=True, logits_to_keep=1,
                              cache_position=torch.tensor([position])).logits
                out.append(int(logits[0, -1].argmax()))
        return out

    started = time.perf_counter()
    decode([0, 1], 3)  # compiles the one-token pass
    return decode, time.perf_counter() - started


def main() -> None:
    """Plain decoding (the lean pass) and the compiled pass on the bench's held-out prompts, interleaved:
    ms/token of each as a share of the bandwidth bound, the compile time, and whether the tokens are the same."""
    from bench.bandwidth import read_bandwidth, weight_bytes
    from bench.measure import bench_prompts, measure, ours
    from specdec_core.models import load_model, load_stock
    from specdec_core.prompts import encode_prompt, stop_token_ids
    from specdec_core.sources import EMBEDDED_ID

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=2, help="prompts per workload (structured, creative)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    decode, compile_seconds = compiled_greedy(load_stock(EMBEDDED_ID, torch.float32))
    methods, labels = {}, []
    for workload, item in bench_prompts(args.prompts):
        prompt, label = encode_prompt(target.tokenizer, item.text), f"{workload}: {item.text[:40]}"
        methods[f"plain {label}"] = ours(target.model, prompt, args.tokens, stops)
        methods[f"compiled {label}"] = lambda prompt=prompt: (decode(prompt, args.tokens, stops), [], None)
        labels.append(label)
    bandwidths = [read_bandwidth()]
    timings, outputs = measure(methods, args.repeats, between=lambda: bandwidths.append(read_bandwidth()))
    bound_ms = 1000 * weight_bytes(target.model) / statistics.median(bandwidths)

    def ms_per_token(method: str) -> float:
        return 1000 * statistics.median(1 / timings[f"{method} {label}"].tokens_per_second for label in labels)

    result = {"compile_s": round(compile_seconds, 1), "bound_ms_per_token": round(bound_ms, 1),
              "identical": all(outputs[f"compiled {label}"] == outputs[f"plain {label}"] for label in labels)}
    for method in ("plain", "compiled"):
        ms = ms_per_token(method)
        result[method] = {"ms_per_token": round(ms, 1), "fraction_of_bound": round(bound_ms / ms, 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
