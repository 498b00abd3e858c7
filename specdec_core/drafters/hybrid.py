"""Retrieval and the learned head in one tree (SAM-Decoding with EAGLE-2, Hu et al. 2024, in small).

When prompt lookup finds a continuation, it enters the head's tree as the first branch from the
root; where the two agree they share nodes. Copying prompts keep the lookup's long exact runs, open
text keeps the head's guesses, and one target pass checks both. Its guesses are deterministic
(q one-hot for the acceptance rule), like the tree's own top-k.
"""

from __future__ import annotations

import time

import torch

from ..kv_cache import CachedModel
from ..sampling import Sampler
from .base import Draft
from .eagle import EagleDrafter
from .ngram import NgramDrafter


class HybridDrafter:
    def __init__(self, head: EagleDrafter, lookup: NgramDrafter | None = None, name: str = "n-gram + EAGLE tree") -> None:
        self.name = name
        self.head = head
        self.lookup = lookup or NgramDrafter()

    def begin(self, target: CachedModel) -> None:
        self.head.begin(target)

    def observe_features(self, start: int, features: torch.Tensor) -> None:
        self.head.observe_features(start, features)

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        guess = self.lookup.propose(context, k, sampler).tokens
        tree = self.head.propose(context, k, sampler)
        tokens, parents, confidence = list(guess), list(range(-1, len(guess) - 1)), [float("nan")] * len(guess)
        merged: dict[int, int] = {}  # head node -> node of the merged tree
        for node, (token, parent) in enumerate(zip(tree.tokens, tree.parents)):
            under = -1 if parent < 0 else merged[parent]
            same = next((n for n, p in enumerate(parents) if p == under and tokens[n] == token), None)
            if same is None:
                tokens.append(token), parents.append(under), confidence.append(float(tree.confidence[node]))
                same = len(tokens) - 1
            else:
                confidence[same] = float(tree.confidence[node])  # a lookup guess the head also made
            merged[node] = same
        order = _parents_first(parents)
        index = {old: new for new, old in enumerate(order)}
        return Draft(
            tokens=tuple(tokens[n] for n in order),
            parents=tuple(-1 if parents[n] < 0 else index[parents[n]] for n in order),
            probs=None,
            confidence=torch.tensor([confidence[n] for n in order]),
            passes=tree.passes,
            seconds=time.perf_counter() - started,
        )

    def observe(self, accepted_count: int) -> None:
        self.head.observe(accepted_count)


def _parents_first(parents: list[int]) -> list[int]:
    """Node order with every parent before its children, siblings in insertion order (lookup first)."""
    order: list[int] = []
    frontier = [n for n, p in enumerate(parents) if p < 0]
    while frontier:
        order += frontier
        frontier = [n for parent in frontier for n, p in enumerate(parents) if p == parent]
    return order
