"""The acceptance rule: the one piece of speculative decoding no library exposes as a function.

transformers keeps its `_speculative_sampling` private and tied to its generate loop, so the
rule is written here, tensor in and tensor out, following Leviathan et al. 2022 (Algorithm 1)
and Chen et al. 2023: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first
rejection draw the replacement from norm(max(0, p_i - q_i)); if all k are accepted draw a
bonus token from p_{k+1}. Greedy decoding is the limit: accept while argmax p_i == x_i.

Over a tree, the same rule walks down from the root and tries a node's children in draft order
(SpecInfer, Miao et al. 2024, multi-candidate rejection; EAGLE's evaluate_posterior): a child x
drawn from q is accepted with min(1, p(x)/q(x)); after a rejection p becomes norm(max(0, p - q))
before the next sibling is tried; if every child is refused the correction is drawn from what is
left of p. A child chosen deterministically (a tree's top-k, an n-gram guess) has q one-hot on
it: accepted with p(x), else x is struck from p. A chain is the tree with one child per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .events import ARGMAX_MATCH, RATIO, TARGET_PROB, Judgement, Rule, Trial
from .sampling import Sampler
from .tree import chain, children

SHOWN_TOKENS = 6  # the top tokens of p and of q a judgement keeps for its picture


@dataclass(frozen=True, slots=True)
class Verdict:
    path: tuple[int, ...]  # the accepted nodes, root to leaf
    next_token: int  # the correction after a rejection, else the bonus token
    target_token_probs: tuple[float, ...]  # p(x) of each node at its parent
    draft_token_probs: tuple[float, ...] | None  # q(x) of each node, None when the drafter gave no q
    accept_probs: tuple[float, ...]  # per node, by the rule
    next_token_prob: float  # p(next_token) at its position
    rule: Rule
    judgements: tuple[Judgement, ...]  # the decision at each node the walk judged, root first

    @property
    def accepted_count(self) -> int:
        return len(self.path)


def rule_of(greedy: bool, drawn: bool) -> Rule:
    """The rule that judges a draft: argmax match when greedy, else min(1, p/q) for tokens drawn from q and p(x)
    for tokens chosen deterministically (q one-hot on them)."""
    if greedy:
        return ARGMAX_MATCH
    return RATIO if drawn else TARGET_PROB


def verify(
    draft_tokens: torch.Tensor,  # [N] int64
    # [N, V] the distribution each node was drawn from; None: chosen deterministically
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,  # [N + 1, V]: row 0 at the root (the last context token), row i + 1 at node i
    sampler: Sampler,
    parents: tuple[int, ...] | None = None,  # None: a chain
    draft_confidence: torch.Tensor | None = None,  # [N] q(x) to report when draft_probs is None (a tree's top-k)
) -> Verdict:
    n = draft_tokens.shape[0]
    parents = chain(n) if parents is None else parents
    at_parent = torch.tensor([parent + 1 for parent in parents], dtype=torch.long)
    p = target_probs[at_parent, draft_tokens]  # [N]
    if draft_probs is not None:
        q = draft_probs[torch.arange(n), draft_tokens]
    else:
        q = draft_confidence if draft_confidence is not None else torch.ones(n)
    rule = rule_of(sampler.greedy, draft_probs is not None)
    if rule == ARGMAX_MATCH:
        accept_probs = (target_probs.argmax(dim=-1)[at_parent] == draft_tokens).float()
    else:
        accept_probs = (p / q).clamp(max=1.0) if rule == RATIO else p
    path, next_token, judgements = _walk(draft_tokens, draft_probs, target_probs, sampler, children(parents))
    return Verdict(
        path=tuple(path),
        next_token=next_token,
        target_token_probs=tuple(p.tolist()),
        draft_token_probs=tuple(q.tolist()) if draft_probs is not None or draft_confidence is not None else None,
        accept_probs=tuple(accept_probs.tolist()),
        next_token_prob=float(target_probs[path[-1] + 1 if path else 0, next_token]),
        rule=rule,
        judgements=tuple(judgements),
    )


def _walk(
    tokens, draft_probs, target_probs, sampler: Sampler, kids: dict[int, list[int]]
) -> tuple[list[int], int, list[Judgement]]:
    """The accepted path from the root, the correction or bonus token after it, and each node's judgement."""
    path: list[int] = []
    judgements: list[Judgement] = []
    node = -1
    while True:
        p = target_probs[node + 1]  # [V] the target at this node
        tried: list[tuple[int, torch.Tensor, torch.Tensor, float]] = []  # (child, p as met, q, accept prob)
        accepted = None
        if sampler.greedy:
            choice = int(p.argmax())
            for child in kids[node]:
                hit = int(tokens[child]) == choice
                tried.append((child, p, _draft_row(tokens, draft_probs, child, p.shape[0]), float(hit)))
                if hit:
                    accepted = child
                    break
        else:
            for child in kids[node]:
                q = _draft_row(tokens, draft_probs, child, p.shape[0])
                x = int(tokens[child])
                keep = min(1.0, float(p[x] / q[x]))
                tried.append((child, p, q, keep))
                # r < min(1, p/q) with r ~ U[0, 1) accepts with probability exactly min(1, p/q).
                if float(sampler.uniform(1)[0]) < keep:
                    accepted = child
                    break
                residual = (p - q).clamp(min=0.0)  # what the rejected guess leaves of p
                p = residual / residual.sum()
        drawn = None if accepted is not None else sampler.pick(p)  # from the residual, or the bonus token from p
        judgements.append(
            _judgement(node, tokens, target_probs[node + 1], tried, accepted, drawn, p, draft_probs is not None)
        )
        if accepted is None:
            return path, drawn, judgements
        path.append(accepted)
        node = accepted


def _judgement(node, tokens, p0, tried, accepted, drawn, left, from_q: bool) -> Judgement:
    """One node's decision over its shown tokens: the top of p and (for tokens drawn from q) of the first child's q,
    every child tried, the token drawn."""
    top = min(SHOWN_TOKENS, p0.shape[0])
    shown = dict.fromkeys(p0.topk(top).indices.tolist())
    if tried and from_q:
        shown.update(dict.fromkeys(tried[0][2].topk(top).indices.tolist()))
    shown.update(dict.fromkeys(int(tokens[child]) for child, *_ in tried))
    if drawn is not None:
        shown[drawn] = None
    ids = torch.tensor(list(shown), dtype=torch.long)
    trials = tuple(
        Trial(
            node=child,
            accept_prob=keep,
            accepted=child == accepted,
            accepted_mass=float(torch.minimum(p, q).sum()),
            residual_mass=float((p - q).clamp(min=0.0).sum()),
            p=tuple(p[ids].tolist()),
            q=tuple(q[ids].tolist()),
        )
        for child, p, q, keep in tried
    )
    return Judgement(
        node=node,
        shown=tuple(shown),
        trials=trials,
        drawn=drawn,
        left=() if drawn is None else tuple(left[ids].tolist()),
    )


def _draft_row(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, i: int, vocab: int) -> torch.Tensor:
    """q as a full distribution [V] for node i; one-hot on its token when it was chosen deterministically."""
    if draft_probs is not None:
        return draft_probs[i]
    return torch.nn.functional.one_hot(draft_tokens[i], vocab).float()
