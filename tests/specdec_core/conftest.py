"""Helpers shared by the engine's and the drafters' tests."""

from __future__ import annotations

import torch
from scipy.stats import chisquare

from specdec_core.sampling import Sampler

PROMPT = [0, 5, 9, 5, 9, 5, 3, 7, 5, 9]


def exact_marginals(target, prompt, sampling) -> tuple[torch.Tensor, torch.Tensor]:
    """p(x1) and p(x2) = sum over x1 of p(x1) p(x2 | x1), after the same warpers as the engine."""
    sampler = Sampler(sampling)
    with torch.no_grad():
        first = sampler.probs(target(torch.tensor([prompt])).logits[0, -1:])[0]
        vocab = target.config.vocab_size
        second = torch.zeros(vocab)
        for x1 in range(vocab):
            row = sampler.probs(target(torch.tensor([prompt + [x1]])).logits[0, -1:])[0]
            second += first[x1] * row
    return first, second


def assert_matches(counts: list[int], probs: torch.Tensor) -> float:
    """The p-value of a chi-square test of sampled counts against probs; a token with p = 0 must never appear."""
    keep = probs > 0
    assert all(c == 0 for c, k in zip(counts, keep.tolist()) if not k), "a token the target cannot emit appeared"
    observed = [c for c, k in zip(counts, keep.tolist()) if k]
    kept = probs[keep].double()
    expected = (kept / kept.sum() * sum(observed)).tolist()
    return chisquare(observed, expected).pvalue
