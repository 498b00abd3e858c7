"""The acceptance rule: the one piece of speculative decoding no library exposes as a function.

transformers keeps its `_speculative_sampling` private and tied to its generate loop, so the
rule is written here, tensor in and tensor out, following Leviathan et al. 2022 (Algorithm 1)
and Chen et al. 2023: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first
rejection draw the replacement from norm(max(0, p_i - q_i)); if all k are accepted draw a
bonus token from p_{k+1}. Greedy decoding is the limit: accept while argmax p_i == x_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import Sampler


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted_count: int
    next_token: int  # the correction after a rejection, else the bonus token
    target_token_probs: tuple[float, ...]  # p_i(x_i) for each drafted token
    draft_token_probs: tuple[float, ...] | None  # q_i(x_i), None when the drafter gave no q
    accept_probs: tuple[float, ...]  # min(1, p/q), or 1/0 when greedy
    next_token_prob: float  # p(next_token) at its position


def verify(
    draft_tokens: torch.Tensor,  # [k] int64
    draft_probs: torch.Tensor | None,  # [k, V]; None means q is one-hot on each drafted token
    target_probs: torch.Tensor,  # [k + 1, V]
    sampler: Sampler,
) -> Verdict:
    k = draft_tokens.shape[0]
    positions = torch.arange(k)
    p = target_probs[positions, draft_tokens]  # [k]
    q = draft_probs[positions, draft_tokens] if draft_probs is not None else torch.ones(k)

    if sampler.greedy:
        target_choice = target_probs.argmax(dim=-1)  # [k + 1]
        accepted = target_choice[:k] == draft_tokens
        accept_probs = accepted.float()
    else:
        accept_probs = (p / q).clamp(max=1.0)
        # r < min(1, p/q) with r ~ U[0, 1) accepts with probability exactly min(1, p/q).
        accepted = sampler.uniform(k) < accept_probs

    rejected_at = (~accepted).nonzero()
    accepted_count = int(rejected_at[0]) if rejected_at.numel() else k

    if accepted_count == k:  # bonus token from the target's last distribution
        next_probs = target_probs[k]
        next_token = int(target_choice[k]) if sampler.greedy else sampler.pick(next_probs)
    elif sampler.greedy:  # correction: the target's argmax where the draft went wrong
        next_probs = target_probs[accepted_count]
        next_token = int(target_choice[accepted_count])
    else:  # correction: resample from the residual norm(max(0, p - q))
        next_probs = target_probs[accepted_count]
        draft_row = _draft_row(draft_tokens, draft_probs, accepted_count, next_probs.shape[0])
        residual = (next_probs - draft_row).clamp(min=0.0)
        next_token = sampler.pick(residual / residual.sum())

    return Verdict(
        accepted_count=accepted_count,
        next_token=next_token,
        target_token_probs=tuple(p.tolist()),
        draft_token_probs=tuple(q.tolist()) if draft_probs is not None else None,
        accept_probs=tuple(accept_probs.tolist()),
        next_token_prob=float(next_probs[next_token]),
    )


def _draft_row(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, i: int, vocab: int) -> torch.Tensor:
    """q_i as a full distribution [V]; one-hot on the drafted token for model-free drafters."""
    if draft_probs is not None:
        return draft_probs[i]
    return torch.nn.functional.one_hot(draft_tokens[i], vocab).float()
