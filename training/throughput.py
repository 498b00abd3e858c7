"""How fast the target writes the corpus here: response tokens per second by batch size, threads
and length bucketing.

    python -m training.throughput                                  # the default grid, a couple of minutes
    python -m training.throughput --batch-sizes 16 32 --threads 1 2 --dtype float32

Every trial answers the same prompts (a seeded sample of draft_data's training prompts) greedily
and counts only real response tokens (cut at the first stop token), not padding. On a machine
whose cores are shared, more threads than free cores makes every OpenMP barrier wait for a
descheduled thread: that is why threads are part of the grid.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from dataclasses import asdict, dataclass

import torch

from training.corpus import embedded_target
from training.draft_data import build_prompts
from training.generation import Sampling, encode_chat, generate


@dataclass(frozen=True, slots=True)
class Trial:
    batch_size: int
    threads: int
    bucketed: bool = True  # prompts sorted by length, so a batch pads little


@dataclass(frozen=True, slots=True)
class Measurement:
    trial: Trial
    tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


def measure(model, prompts: list[list[int]], stops: list[int], trial: Trial, max_new_tokens: int) -> Measurement:
    torch.set_num_threads(trial.threads)
    ordered = sorted(prompts, key=len) if trial.bucketed else prompts
    sampling = Sampling(0.0, max_new_tokens=max_new_tokens)
    started = time.perf_counter()
    tokens = 0
    for i in range(0, len(ordered), trial.batch_size):
        tokens += sum(len(c.ids) for c in generate(model, ordered[i : i + trial.batch_size], sampling, stops))
    return Measurement(trial, tokens, time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--unbucketed", action="store_true", help="also try prompts in random order")
    parser.add_argument(
        "--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="as training.corpus --dtype"
    )
    args = parser.parse_args(argv)
    target = embedded_target(args.dtype)
    print(f"the target writes in {target.model.dtype}", flush=True)
    texts = build_prompts("train")
    random.Random(0).shuffle(texts)
    prompts = [encode_chat(target.tokenizer, [{"role": "user", "content": p.text}]) for p in texts[: args.prompts]]
    orders = [True, False] if args.unbucketed else [True]
    results = []
    for batch, threads, bucketed in itertools.product(args.batch_sizes, args.threads, orders):
        m = measure(target.model, prompts, target.stops, Trial(batch, threads, bucketed), args.max_new_tokens)
        results.append(
            {
                **asdict(m.trial),
                "tokens": m.tokens,
                "seconds": round(m.seconds, 2),
                "tokens_per_second": round(m.tokens_per_second, 1),
            }
        )
        print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
