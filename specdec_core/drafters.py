"""Drafters: anything that can guess the next few tokens cheaply.

The interface follows transformers' candidate generators: propose candidates, then learn
how many were accepted. A drafter belongs to one run (a model drafter holds that run's KV cache).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from .kv_cache import CachedModel
from .sampling import Sampler


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: tuple[int, ...]
    probs: torch.Tensor | None  # [len(tokens), V] the draft distribution q at each position; None: no q
    passes: int  # draft forward passes spent (0 for model-free drafters)
    seconds: float


class Drafter(Protocol):
    name: str

    def begin(self, target: CachedModel) -> None:
        """Called once, after the target has read the prompt (its cache holds it)."""
        ...

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        """Up to k tokens that might follow context (fewer when unsure or out of ideas)."""
        ...

    def observe(self, accepted_count: int) -> None:
        """How many of the last proposal's tokens the target accepted."""
        ...


class FeatureDrafter(Drafter, Protocol):
    """A drafter that reads the target's hidden states (an EAGLE head, eagle.py). The engine calls
    observe_features after every target pass of the run, the prompt's included, so the drafter
    sees real features for every position the target has verified."""

    def observe_features(self, start: int, features: torch.Tensor) -> None:
        """features [n, H]: the target's last hidden states for positions start..start+n-1."""
        ...


class ModelDrafter:
    """A small causal LM that samples its guesses with the run's own sampler (same warpers as the target)."""

    def __init__(
        self,
        model: PreTrainedModel,
        name: str = "draft model",
        min_confidence: float = 0.0,
        shares_target_weights: bool = False,
    ) -> None:
        self.name = name
        self.min_confidence = min_confidence
        self.shares_target_weights = shares_target_weights  # a copy or truncation of the target itself
        self._model = CachedModel(model)
        self._proposal_start = 0  # context length when the last proposal began

    def begin(self, target: CachedModel) -> None:
        if self.shares_target_weights:
            self._model.adopt_prefix(target, target.length)

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        passes_before = self._model.passes
        self._proposal_start = len(context)
        # The cache holds a prefix of context; feeding the rest first also catches up on the
        # bonus/correction token of the last step and any steps taken without drafting.
        feed = context[self._model.length :]
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for _ in range(k):
            q = sampler.probs(self._model.forward(feed))[0]  # [V]
            if self.min_confidence and float(q.max()) < self.min_confidence:
                break
            token = sampler.pick(q)
            tokens.append(token)
            rows.append(q)
            feed = [token]
        probs = torch.stack(rows) if rows else None
        return Draft(tuple(tokens), probs, self._model.passes - passes_before, time.perf_counter() - started)

    def observe(self, accepted_count: int) -> None:
        # KV rollback: keep the context plus the accepted drafts this cache has seen; the
        # rejected ones (and the last draft, never fed) are recomputed from the context next time.
        self._model.rollback(self._proposal_start + accepted_count)


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
        return Draft(tokens, None, 0, time.perf_counter() - started)

    def _lookup(self, context: list[int], k: int) -> tuple[int, ...]:
        length = len(context)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            pattern = context[-n:]
            # Latest match first: recent text predicts the continuation best.
            for start in range(length - n - 1, -1, -1):
                if context[start : start + n] == pattern:
                    continuation = context[start + n : start + n + k]
                    if continuation:
                        return tuple(continuation)
        return ()

    def observe(self, accepted_count: int) -> None:
        """Nothing to learn: the text itself is the model."""
