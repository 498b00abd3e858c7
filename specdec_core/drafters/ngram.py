"""Prompt lookup: a drafter with no model, which proposes what followed the last n tokens before."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..events import LOOKUP
from ..sampling import Sampler
from ..tree import chain
from .base import Draft, Drafter


class NgramDrafter(Drafter):
    """Prompt lookup (Saxena 2023): find the latest earlier occurrence of the last n tokens
    and propose what followed it. Costs no model pass; gives no q, so the acceptance rule
    treats each guess as certain (q one-hot).

    earliest=True follows vLLM's n-gram proposer instead (the longest match's earliest occurrence, whatever
    follows it up to k), so that a run beside a vLLM server drafts the same tokens (served/compare.py)."""

    def __init__(
        self, max_ngram: int = 3, min_ngram: int = 1, name: str = "n-gram lookup", earliest: bool = False
    ) -> None:
        self.name = name
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.earliest = earliest

    @property
    def c_at_load(self) -> float | None:
        return 0.0  # no model pass: a lookup costs microseconds beside a target pass

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        tokens = self.continuation(context, self.match(context), k)
        return Draft(tokens, chain(len(tokens)), None, None, 0, time.perf_counter() - started, (LOOKUP,) * len(tokens))

    def match(self, context: list[int]) -> int:
        """The longest n (max_ngram down to min_ngram) whose last n tokens occurred earlier in the context; 0 if
        none. A longer match is the surer guess (the hybrid keeps an acceptance per n)."""
        for n in range(min(self.max_ngram, len(context) - 1), self.min_ngram - 1, -1):
            if next(_starts(context, n), None) is not None:
                return n
        return 0

    def continuation(self, context: list[int], n: int, k: int) -> tuple[int, ...]:
        """Up to k tokens that followed an earlier occurrence of the last n. Latest match first: recent text
        predicts the continuation best. A match too close to the end (inside a repeating run) leaves fewer than
        k tokens after it: an earlier one may not."""
        if n and self.earliest:
            start = min(_starts(context, n))
            return tuple(context[start + n : start + n + k])
        best: list[int] = []
        for start in _starts(context, n) if n else ():
            continuation = context[start + n : start + n + k]
            if len(continuation) == k:
                return tuple(continuation)
            best = max(best, continuation, key=len)
        return tuple(best)


def _starts(context: list[int], n: int) -> Iterator[int]:
    """Where the last n tokens occurred before, latest first."""
    pattern = context[-n:]
    return (start for start in range(len(context) - n - 1, -1, -1) if context[start : start + n] == pattern)
