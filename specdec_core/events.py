"""The typed events both decoders yield, and the outcome vocabulary shared by engine, views and charts.

A run is a stream of steps, one per target forward pass, closed by a Finished event
that carries the summary computed from those steps (stats.summarize).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# One vocabulary everywhere: event outcomes, CSS classes, legend entries and chart labels.
ACCEPTED = "accepted"  # a draft token the target agreed with
REJECTED = "rejected"  # the first draft token the target refused (never emitted)
CORRECTION = "correction"  # the target's own token in place of the rejected one
BONUS = "bonus"  # the target's extra token after all drafts were accepted
TARGET = "target"  # a token from a plain target-only step
Outcome = Literal["accepted", "rejected", "correction", "bonus", "target"]


@dataclass(frozen=True, slots=True)
class PlainStep:
    """One target pass that produced one token without a draft (plain decoding, or k=0)."""

    token: int
    target_prob: float  # p(token) under the processed target distribution
    seconds: float
    emitted_tokens: tuple[int, ...]  # (token,): the same field as SpecStep, so consumers need no case

    drafted_count = 0
    accepted_count = 0
    rejected_count = 0
    draft_passes = 0


@dataclass(frozen=True, slots=True)
class SpecStep:
    """One draft-then-verify round: a drafted tree of N nodes (a chain when each has one child),
    one target pass over all of them, and the path the target accepted."""

    draft_tokens: tuple[int, ...]  # the N drafted nodes' tokens, parents before children
    parents: tuple[int, ...]  # parent of each node; -1: a child of the root (the last context token)
    path: tuple[int, ...]  # the accepted nodes, root to leaf
    draft_probs: tuple[float, ...] | None  # q(x) of each node under the draft; None for model-free drafters
    target_probs: tuple[float, ...]  # p(x) of each node under the target at its parent
    accept_probs: tuple[float, ...]  # min(1, p/q) per node; 1 or 0 when greedy
    next_token: int  # the correction (after a rejection) or the bonus token (after the path ends at a leaf)
    next_token_prob: float  # p(next_token) under the target
    emitted_tokens: tuple[int, ...]  # accepted drafts + next token, cut at EOS / the token budget
    draft_passes: int
    draft_seconds: float
    verify_seconds: float

    @property
    def drafted_count(self) -> int:
        return len(self.draft_tokens)

    @property
    def accepted_count(self) -> int:
        return len(self.path)

    @property
    def emitted_path(self) -> tuple[int, ...]:
        """The accepted nodes the output kept: the path, cut after an end token the target accepted inside
        it (the nodes below it were accepted too, but the answer had ended)."""
        return self.path[: len(self.emitted_tokens)]

    @property
    def accepted_after_end(self) -> tuple[int, ...]:
        """The accepted nodes below that end token: the target agreed with them, but they were not emitted."""
        return self.path[len(self.emitted_tokens) :]

    @property
    def next_emitted(self) -> bool:
        """Whether the target's own token (correction or bonus) reached the output: not when the answer
        ended on an accepted draft."""
        return len(self.emitted_tokens) > len(self.path)

    @property
    def rejected_count(self) -> int:
        """Drafts not accepted: refused ones, and those below them, which are discarded unverified."""
        return len(self.draft_tokens) - len(self.path)

    @property
    def is_chain(self) -> bool:
        return all(parent == node - 1 for node, parent in enumerate(self.parents))

    @property
    def rejected_token(self) -> int | None:
        """The draft's first guess where the target disagreed: the first child of the path's last
        node; None when that node is a leaf (everything drafted along the path was accepted)."""
        last = self.path[-1] if self.path else -1
        first_child = next((node for node, parent in enumerate(self.parents) if parent == last), None)
        return None if first_child is None else self.draft_tokens[first_child]

    @property
    def next_outcome(self) -> Outcome:
        if not self.draft_tokens:  # the drafter had nothing to offer: a plain target token
            return TARGET
        return CORRECTION if self.rejected_token is not None else BONUS

    @property
    def seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds


Step = PlainStep | SpecStep


@dataclass(frozen=True, slots=True)
class Summary:
    """Raw counts of a run and the rates derived from them (stats.summarize computes them)."""

    tokens: int
    target_passes: int
    draft_passes: int
    drafted: int
    accepted: int
    seconds: float  # compute time of the run: the sum of its steps' times
    stop_reason: str  # "eos", "max_new_tokens", "context_full", "time_limit"
    accepted_length_counts: tuple[int, ...]  # [n] = drafting steps that accepted exactly n tokens

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target pass: accepted drafts plus the correction or bonus token."""
        return self.tokens / self.target_passes if self.target_passes else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Finished:
    summary: Summary


Event = PlainStep | SpecStep | Finished
