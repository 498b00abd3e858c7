"""python -m bench --bandwidth --compiled: an experiment, not a serving path. How fast plain decoding runs
when inductor compiles the whole one-token pass (gpt-fast's recipe on a CPU: a static KV cache,
torch.compile with freezing and max-autotune, whose C++ GEMM template replaces oneDNN's matrix-vector
products), what the compilation costs, and whether the tokens stay the same.

Why it is not in the engine (measured 2026-12-03 on a 2-core AMD EPYC with AVX-512, torch 2.13): the
compiled one-token pass ran at ~31 ms against ~48 ms for ours, but compiling took ~130 s, and a second
process compiled again from scratch: inductor's on-disk graph cache refuses graphs that hold packed
(mkldnn) weights ("mkldnn tensors unpickleable"), and without packing the template is not used and the
pass is slower than ours. Serving it would need an ahead-of-time package (AOTInductor) per machine and
compiled verification widths (or speculation loses to the faster single pass; bench/bandwidth.py reports
T(n)/T(1)).
"""

from __future__ import annotations

import time

import torch
import torch._inductor.config as inductor_config
from transformers import PreTrainedModel, StaticCache


def compiled_greedy(model: PreTrainedModel, mode: str | None = "max-autotune", cache_length: int = 512):
    """A greedy decoder whose one-token pass is compiled once; returns (decode, compile_seconds).

    decode(prompt_ids, tokens, stops) -> generated ids, ending at a stop token or after `tokens`. model
    must be a separate copy with dense weights (models.load_stock): freezing folds them into the graph."""
    step = torch.compile(model.forward, mode=mode, dynamic=False)
    cache = StaticCache(config=model.config, max_cache_len=cache_length)  # one for every call: its buffers are graph inputs

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
