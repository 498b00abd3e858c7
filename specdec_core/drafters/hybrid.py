"""Retrieval and the learned head in one tree (SAM-Decoding with EAGLE-2, Hu et al. 2024, in small).

When prompt lookup finds a continuation, it enters the head's tree as the first branch from the
root; where the two agree they share nodes. Copying prompts keep the lookup's long exact runs, open
text keeps the head's guesses, and one target pass checks both. Its guesses are deterministic
(q one-hot for the acceptance rule), like the tree's own top-k.

The lookup branch has its own length, chosen like the adaptive k (schedule.py) from what it has
earned in this run: its per-token acceptance a after matches as long as this one (a guess continuing
the last three tokens is far surer than one continuing the last token alone), and this machine's
verification cost curve, the length with the most expected tokens per unit of pass cost, at least
the head's depth k. While the text copies a span (the last lookup guess was accepted whole) the
lookup drafts alone: the head's passes and side branches would only add cost there. The first
guess accepted in part brings the head back; its cache catches up on the skipped positions in its
next pass.

The head's tree is sized with the lookup branch in the same pass (tree.SideBranch): its nodes widen the
pass, and what they are expected to give counts toward the step's tokens.

The head also has to earn its passes. On each step it ran, the tokens it gave and what the step
cost in target passes (the merged tree's verification from the measured curve, plus its k passes
at the c of a tree level, measured at load) are set against what the lookup alone would have given on the same
step (the accepted part of its guess, at the cost of verifying the guess only). Where the head's
steps yield fewer tokens per unit of cost, on text it cannot predict (translation, for the
embedded head), the lookup drafts alone, and the head is tried again every PROBE_EVERY steps.
Both costs come from load-time measurements, not this run's clock, so a greedy run makes the
same choices every time.
"""

from __future__ import annotations

import time

import torch

from ..costs import CostCurve
from ..events import HEAD, LOOKUP, LOOKUP_AND_HEAD
from ..kv_cache import CachedModel
from ..sampling import Sampler
from ..schedule import ADAPTIVE_LONGEST
from ..theory import expected_speedup, expected_tokens_per_step
from ..tree import SideBranch, chain, merged
from .base import Draft, Drafter
from .eagle import EagleDrafter
from .ngram import NgramDrafter

# The past's weight for the lookup's acceptance: copied spans start and end abruptly, so it forgets within a few
# steps.
LOOKUP_DECAY = 0.8
# The head's ledger remembers longer (about ten steps): one step's accepted count swings from 0 to k,
# and a head turned off by a short unlucky run is only tried again PROBE_EVERY steps later.
HEAD_DECAY = 0.9


class HybridDrafter(Drafter):
    LONGEST_LOOKUP = ADAPTIVE_LONGEST  # as the adaptive k's longest
    PROBE_EVERY = 8  # steps without the head before it is tried again

    def __init__(
        self,
        head: EagleDrafter,
        lookup: NgramDrafter | None = None,
        name: str = "n-gram + EAGLE tree",
        curve: CostCurve | None = None,
        c: float = 0.0,
    ) -> None:
        """curve: this machine's T(n)/T(1) (tuning.py), which sizes the lookup branch and prices
        the tree (without it the lookup drafts k, and the head runs on every step whose last guess was not
        copied whole); c: one pass of the head's tree level over one target pass."""
        self.name = name
        self.head = head
        self.lookup = lookup or NgramDrafter()
        self._curve = curve
        self._c = c
        self._guess: tuple[int, ...] = ()  # the last step's lookup guess
        self._match = 0  # the length of the match it continued (NgramDrafter.match)
        self._drafted_at = 0  # the context length it was drafted after
        self._accepted = 0  # draft tokens the target accepted in that step
        # Lookup tokens ruled on and accepted, decayed, by match length: a guess's acceptance rises steeply with
        # the match it continues (bench/RESULTS.md, 2026-12-06, commit 600d28f), and one figure for all would size
        # the surest guesses and the least sure alike.
        self._judged = [0.0] * (self.lookup.max_ngram + 1)
        self._agreed = [0.0] * (self.lookup.max_ngram + 1)
        self._head_step: tuple[int, int] | None = None  # the last step's merged tree size and head passes, if it ran
        # Decayed tokens and costs of the head's steps, with the head and (counterfactually) without it.
        # They start as two pseudo-steps where the head added a token, so that a few unlucky first steps
        # do not turn it off; on text it cannot predict, about eight do.
        self._with = [4.0, 2.0]
        self._without = [2.0, 2.0]
        self._without_head = 0  # steps since the head last ran

    @property
    def gates_itself(self) -> bool:
        """With a cost curve it turns the head off itself (_head_pays) and its lookup is free, so an adaptive k
        only sizes the head's tree and never stops drafting (schedule.make_schedule): a k of 0 would stop the
        free lookup too where the head fails (translation), leaving the hybrid below the lookup alone. Without a curve
        the ledger cannot price the head, and the adaptive k decides as for any drafter."""
        return self._curve is not None

    def begin(self, target: CachedModel) -> None:
        self.head.begin(target)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.head.feature_layers

    def observe_features(self, start: int, features: torch.Tensor) -> None:
        self.head.observe_features(start, features)

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        copying = self._learn(context)
        curve = self._curve.at(len(context)) if self._curve else None  # wide passes cost more behind a long context
        self._drafted_at = len(context)
        self._match = match = self.lookup.match(context)
        self._guess = guess = self.lookup.continuation(context, match, self._length(k, curve, match))
        if (copying and guess) or not self._head_pays():
            self._head_step = None
            self._without_head += 1
            return Draft(guess, chain(len(guess)), None, None, 0, time.perf_counter() - started, (LOOKUP,) * len(guess))
        self._without_head = 0
        # the drafts' expected tokens, not the pass's own token
        guessed = expected_tokens_per_step(self._acceptance(match), len(guess)) - 1.0
        tree = self.head.propose(context, k, sampler, SideBranch(len(guess), guessed))
        draft = _merge(guess, tree, seconds=time.perf_counter() - started)
        self._head_step = (len(draft.tokens), tree.passes)
        return draft

    def observe(self, accepted_count: int) -> None:
        self._accepted = accepted_count
        self.head.observe(accepted_count)

    def _learn(self, context: list[int]) -> bool:
        """Scores the last step's lookup guess and head; True when the guess was accepted whole (the text is
        copying)."""
        # The accepted nodes' tokens follow the context they were drafted after (plain steps of an adaptive
        # k may have come since, without an observe).
        path = context[self._drafted_at : self._drafted_at + self._accepted]
        copied = next(
            (n for n, (a, b) in enumerate(zip(path, self._guess)) if a != b), min(len(path), len(self._guess))
        )
        if self._head_step is not None and self._curve is not None:
            nodes, passes = self._head_step
            costs = self._curve.step_costs(self._drafted_at, self._c)  # where that step was drafted and verified
            self._with = [
                HEAD_DECAY * self._with[0] + self._accepted + 1,
                HEAD_DECAY * self._with[1] + costs.step(nodes + 1, passes),
            ]
            self._without = [
                HEAD_DECAY * self._without[0] + copied + 1,
                HEAD_DECAY * self._without[1] + costs.step(len(self._guess) + 1, 0),
            ]
        if not self._guess:
            return False
        whole = copied == len(self._guess)
        n = self._match
        self._judged[n] = LOOKUP_DECAY * self._judged[n] + copied + (not whole)
        self._agreed[n] = LOOKUP_DECAY * self._agreed[n] + copied
        return whole

    def _head_pays(self) -> bool:
        with_rate, without_rate = self._with[0] / self._with[1], self._without[0] / self._without[1]
        return with_rate >= without_rate or self._without_head >= self.PROBE_EVERY

    def _acceptance(self, match: int) -> float:
        """The lookup's per-token acceptance after a match of this length in this run (decayed); 0 before any
        such guess was judged."""
        return self._agreed[match] / self._judged[match] if self._judged[match] else 0.0

    def _length(self, k: int, curve: CostCurve | None, match: int) -> int:
        """The lookup guess's length after a match of this length: the most expected tokens per unit of
        verification cost, at least k."""
        if curve is None or not self._judged[match]:
            return k
        a = self._acceptance(match)
        return max(
            range(k, max(k, self.LONGEST_LOOKUP) + 1), key=lambda n: expected_speedup(a, n, 0.0, curve.ratio(n + 1))
        )


def _merge(guess: tuple[int, ...], tree: Draft, seconds: float) -> Draft:
    """The lookup guess as the first branch from the root, the head's tree merged into it (shared where equal);
    a node's confidence is the head's q where the head drafted it, NaN for the lookup's own guesses; its source says
    which proposed it."""
    tokens, parents, from_guess, from_head = merged((guess, chain(len(guess))), (tree.tokens, tree.parents))
    confidence = torch.full((len(tokens),), float("nan"))
    confidence[from_head] = tree.confidence
    sources = [HEAD] * len(tokens)
    for node in from_guess:
        sources[node] = LOOKUP_AND_HEAD if node in from_head else LOOKUP
    return Draft(tokens, parents, None, confidence, tree.passes, seconds, tuple(sources))
