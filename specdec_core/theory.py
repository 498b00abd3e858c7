"""Closed-form expectations from Leviathan et al. 2022 (section 3), used by the explainer and the benchmark."""

from __future__ import annotations


def expected_tokens_per_step(acceptance_rate: float, k: int) -> float:
    """(1 - a^(k+1)) / (1 - a): accepted drafts plus the correction or bonus token."""
    a = acceptance_rate
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def expected_speedup(acceptance_rate: float, k: int, cost_ratio: float) -> float:
    """(1 - a^(k+1)) / ((1 - a)(k c + 1)): walltime gain over plain decoding when one draft
    step costs c target steps and verifying k tokens costs as much as one target step."""
    return expected_tokens_per_step(acceptance_rate, k) / (k * cost_ratio + 1.0)
