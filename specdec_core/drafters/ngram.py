"""Prompt lookup: a drafter with no model, which proposes what followed the last n tokens before."""

from __future__ import annotations

import time

from ..kv_cache import CachedModel
from ..sampling import Sampler
from .base import Draft
from .tree import chain


class NgramDrafter:
    """Prompt lookup (Saxena 2023): find the latest earlier occurrence of the last n tokens
    and propose what followed it. Costs no model pass; gives no q, so the acceptance rule
    treats each guess as certain (q one-hot)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, name: str = "n-gram lookup") -> None:
        self.name = name
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def begin(self, target: CachedModel) -> None:
        """Nothing to prepare: the context is searched afresh at each step."""

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        tokens = self._lookup(context, k)
        return Draft(tokens, chain(len(tokens)), None, None, 0, time.perf_counter() - started)

    def _lookup(self, context: list[int], k: int) -> tuple[int, ...]:
        length = len(context)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            pattern = context[-n:]
            best: list[int] = []
            # Latest match first: recent text predicts the continuation best. A match too close to the
            # end (inside a repeating run) leaves fewer than k tokens after it: an earlier one may not.
            for start in range(length - n - 1, -1, -1):
                if context[start : start + n] == pattern:
                    continuation = context[start + n : start + n + k]
                    if len(continuation) == k:
                        return tuple(continuation)
                    best = max(best, continuation, key=len)
            if best:
                return tuple(best)
        return ()

    def observe(self, accepted_count: int) -> None:
        """Nothing to learn: the text itself is the model."""
