"""The drafter interface: anything that can guess the next few tokens cheaply, and the Draft it proposes.

The interface follows transformers' candidate generators: propose candidates, then learn how many were
accepted. A drafter belongs to one run (a model drafter holds that run's KV cache). Every drafter
subclasses Drafter, whose defaults fit one that needs none of the optional parts: a drafter that reads the
target's hidden states (the EAGLE head) names feature_layers and takes them in observe_features after every
target pass; one whose costly part turns itself off (the hybrid's head) says so with gates_itself, and an
adaptive k then never goes below 1.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from ..events import DraftSource
from ..kv_cache import CachedModel
from ..sampling import Sampler
from ..tree import depths, reindexed


@dataclass(frozen=True, slots=True)
class Draft:
    """A drafted tree of N nodes (tree.py); a chain when parents == tree.chain(N)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]  # parent of each node, -1 for the root's children; parents come first
    probs: torch.Tensor | None  # [N, V] the distribution q each node was sampled from; None: chosen deterministically
    confidence: torch.Tensor | None  # [N] q(x) of each node's token, to show; None for model-free drafters
    passes: int  # draft forward passes spent (0 for model-free drafters)
    seconds: float
    sources: tuple[DraftSource, ...]  # which part of the drafter proposed each node

    def truncated(self, depth: int) -> Draft:
        """The nodes at most `depth` deep (what the budget leaves room for); parents come first, so a
        node's ancestors always stay with it."""
        kept = [node for node, d in enumerate(depths(self.parents)) if d <= depth]
        if len(kept) == len(self.tokens):
            return self
        rows = torch.tensor(kept, dtype=torch.long)
        return Draft(
            tokens=tuple(self.tokens[n] for n in kept),
            parents=reindexed(self.parents, kept),
            probs=None if self.probs is None else self.probs[rows],
            confidence=None if self.confidence is None else self.confidence[rows],
            passes=self.passes,
            seconds=self.seconds,
            sources=tuple(self.sources[n] for n in kept),
        )


class Drafter(ABC):
    """What the engine calls on a drafter, with the defaults of one that needs none of the optional parts."""

    name: str

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target layers whose outputs observe_features takes; () = none."""
        return ()

    @property
    def gates_itself(self) -> bool:
        """Turns its costly part off by itself: an adaptive k then keeps drafting."""
        return False

    @property
    def c_at_load(self) -> float | None:
        """One draft pass over one single-token target pass, measured when the drafter was made (tuning.py); None
        where not measured: an adaptive k then learns it from the run's steps."""
        return None

    @property
    def reads_what_it_missed(self) -> bool:
        """Its first draft reads the whole prompt, and a draft after plain steps their tokens, with passes of its
        own (a separate draft model); False where that is free or cheap beside a draft pass (a lookup, a copy of
        the target taking the target's cache entries, a head reading the target's features)."""
        return False

    def begin(self, target: CachedModel) -> None:  # noqa: B027  (a default: nothing to prepare)
        """Called once, after the target has read the prompt (its cache holds it)."""

    @abstractmethod
    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        """Up to k tokens that might follow context (fewer when unsure or out of ideas)."""

    def observe(self, accepted_count: int) -> None:  # noqa: B027  (a default: nothing to learn)
        """How many of the last proposal's tokens the target accepted."""

    def observe_features(self, start: int, features: torch.Tensor) -> None:  # noqa: B027  (a default: reads none)
        """The target's features [n, F] (feature_layers side by side) for positions start..start+n-1 of its latest
        pass; called after every target pass when feature_layers is not empty."""
