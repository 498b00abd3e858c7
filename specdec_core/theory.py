"""Closed-form expectations from Leviathan et al. 2022 (section 3), used by the explainer and the benchmark."""

from __future__ import annotations


def expected_tokens_per_step(acceptance_rate: float, k: int) -> float:
    """(1 - a^(k+1)) / (1 - a): accepted drafts plus the correction or bonus token."""
    a = acceptance_rate
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def expected_speedup(acceptance_rate: float, k: int, c: float, verify_ratio: float = 1.0) -> float:
    """E[tokens per pass] / (T(k+1)/T(1) + k c): walltime gain over plain decoding when one draft
    step costs c target steps and verifying k tokens costs verify_ratio = T(k+1)/T(1) target steps.

    verify_ratio = 1 is the paper's ideal, (1 - a^(k+1)) / ((1 - a)(k c + 1)), near true on a GPU;
    on a CPU a wider pass costs more, and the measured curve (tuning.py) gives the ratio."""
    return expected_tokens_per_step(acceptance_rate, k) / (k * c + verify_ratio)
