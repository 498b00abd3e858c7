"""A clock for target passes: the time of one pass over n new tokens behind a fixed context, as the tuning reads
it (tuning.py)."""

from __future__ import annotations

import time

import torch
from transformers import DynamicCache, PreTrainedModel

from .lean_pass import run_pass


class PassClock:
    """Times one pass over n new tokens behind the same context_tokens cached ones each time: the context is read
    once, and each pass's n new entries are dropped after it."""

    def __init__(self, model: PreTrainedModel, context_tokens: int, widest: int) -> None:
        self.model, self.cache = model, DynamicCache(config=model.config)
        generator = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        context = torch.randint(vocab, (1, context_tokens), generator=generator, device=model.device)
        run_pass(model, context, self.cache)
        self.new = torch.randint(vocab, (1, widest), generator=generator, device=model.device)

    def time(self, n: int) -> float:
        started = time.perf_counter()
        run_pass(self.model, self.new[:, :n], self.cache, logits_to_keep=n)
        if self.new.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        self.cache.crop(-n)
        return seconds

    def warm(self, widths) -> None:
        """One untimed pass per width: one-time kernel set-up per shape."""
        for n in widths:
            self.time(n)
