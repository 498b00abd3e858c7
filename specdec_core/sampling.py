"""Logits to probabilities to tokens, identical for draft and target.

The filters are transformers' own logits warpers, so temperature / top-k / top-p mean
exactly what they mean in `generate`. Speculative sampling is lossless only if the draft's
q and the target's p come out of this same processing (vLLM #10198 is what happens otherwise).
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from .config import SamplingConfig


class Sampler:
    """Owns the run's seeded random generator and the logits processing."""

    def __init__(self, config: SamplingConfig) -> None:
        self.greedy = config.greedy
        self.generator = torch.Generator().manual_seed(config.seed)
        self._warpers = LogitsProcessorList()
        if not self.greedy:
            if config.temperature != 1.0:
                self._warpers.append(TemperatureLogitsWarper(config.temperature))
            if config.top_k > 0:
                self._warpers.append(TopKLogitsWarper(config.top_k))
            if config.top_p < 1.0:
                self._warpers.append(TopPLogitsWarper(config.top_p))

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [n, V] -> probabilities [n, V] (float32).

        Greedy decoding keeps the plain softmax: it only decides by argmax, and the
        probabilities are what the views show on hover.
        """
        if self._warpers:
            logits = self._warpers(None, logits)
        return torch.softmax(logits.float(), dim=-1)

    def pick(self, probs: torch.Tensor) -> int:
        """One token from a distribution [V]: argmax when greedy, else a seeded draw."""
        if self.greedy:
            return int(probs.argmax())
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def uniform(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.generator)
