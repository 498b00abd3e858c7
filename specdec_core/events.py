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

# Which part of a drafter proposed a node.
LOOKUP = "lookup"  # a continuation of an earlier match of the last tokens in the context (model-free)
HEAD = "head"  # the EAGLE head, reading the target's hidden states
DRAFT_MODEL = "draft model"  # a smaller language model: a copy, an early exit, a hub draft
LOOKUP_AND_HEAD = "lookup and head"  # both proposed the same node (the hybrid merges them)
DraftSource = Literal["lookup", "head", "draft model", "lookup and head"]

# The rule that judged a step's nodes (acceptance.py), as the views name it.
ARGMAX_MATCH = "argmax match"  # greedy: accepted when the node is the target's most likely token
RATIO = "min(1, p/q)"  # drawn from the draft's q: accepted with probability min(1, p(x) / q(x))
TARGET_PROB = "p(x)"  # chosen deterministically (a tree's top-k, a lookup guess): accepted with probability p(x)
Rule = Literal["argmax match", "min(1, p/q)", "p(x)"]
RULE_REASONS: dict[str, str] = {
    ARGMAX_MATCH: "greedy decoding: a draft is kept when it is the target's most likely token",
    RATIO: "sampled drafts: a token drawn from the draft's q is kept with probability min(1, p/q)",
    TARGET_PROB: "a guess chosen, not drawn (a tree's top tokens, a lookup): its q is 1 on that token, so it is "
    "kept with probability min(1, p/1) = p(x); the draft's own confidence plays no part",
}


@dataclass(frozen=True, slots=True)
class Trial:
    """One child tried at a node, with p as it met it (what earlier siblings' refusals left) and q, over the shown
    tokens of its Judgement."""

    node: int
    accept_prob: float  # min(1, p/q), p(x) for a chosen guess, or 1/0 when greedy
    accepted: bool
    accepted_mass: float  # sum over the vocabulary of min(p, q): the chance that this trial keeps a token
    residual_mass: float  # sum of max(0, p - q): what a refusal leaves of p before it is renormalised
    p: tuple[float, ...]
    q: tuple[float, ...]  # one-hot on the child's token when it was chosen, not drawn


@dataclass(frozen=True, slots=True)
class Judgement:
    """The target's decision at one node of a draft, kept for the picture of the rule: its children tried in
    draft order, then (when none was kept) the token it drew from what was left of p. Only a few top tokens are
    kept, so a step's judgements stay small."""

    node: int  # whose children were judged; -1: the root (the last context token)
    shown: tuple[int, ...]  # the top tokens of p and of q, every child tried, the token drawn
    trials: tuple[Trial, ...]
    drawn: int | None  # the correction or bonus token; None when a child was kept
    left: tuple[float, ...]  # p when the token was drawn (renormalised), over shown; () when a child was kept


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
    accept_probs: tuple[float, ...]  # per node, by the rule: 1 or 0 when greedy
    rule: Rule  # how the target judged this step's nodes
    sources: tuple[DraftSource, ...]  # which part of the drafter proposed each node
    judgements: tuple[Judgement, ...]  # the target's decision at each node it judged, root first
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
