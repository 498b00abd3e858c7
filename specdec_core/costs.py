"""What a speculative step costs, in one-token target passes: the verification cost curve T(n)/T(1) and a step's
price at a context length. Pure: the figures are measured by tuning.py; trees, the hybrid, adaptive k and the
bench all price steps through here, so that they count alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from .limits import MEASURED_DRAFT_TOKENS

LONGEST_VERIFICATION = MEASURED_DRAFT_TOKENS + 1  # the cost curve covers passes of 1..17 tokens (k up to 16)
CONTEXT_TOKENS = 160  # cached tokens behind a timed pass: a prompt plus part of an answer
# ... and behind a long prompt (a passage to summarize, a RAG context): a pass's attention reads every cached
# token for each new one, so a wide pass costs relatively more there, and a tree sized by the short curve would be
# too large on long prompts.
LONG_CONTEXT_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class CostCurve:
    """seconds[n - 1]: one target pass over n new tokens with CONTEXT_TOKENS cached (medians);
    long_seconds: the same with LONG_CONTEXT_TOKENS cached, where measured. A curve from at(context) holds
    the seconds at that context alone."""

    seconds: tuple[float, ...]
    long_seconds: tuple[float, ...] | None = None

    def ratio(self, tokens: int) -> float:
        """T(n) / T(1). Past the widest measured pass (a hybrid's merged tree can be 33 tokens wide, a k of 32
        asked through the API), the cost is extrapolated along the mean step of the curve's upper half: the work
        of a pass past a few rows grows about linearly in its width, and the last step alone is often flat where
        the non-decreasing fit pooled the noisy top."""
        n, widest = max(tokens, 1), len(self.seconds)
        if n <= widest:
            return self.seconds[n - 1] / self.seconds[0]
        middle = widest // 2
        slope = (self.seconds[-1] - self.seconds[middle - 1]) / (widest - middle) if widest > 1 else 0.0
        return (self.seconds[-1] + (n - widest) * slope) / self.seconds[0]

    def describe(self) -> str:
        """A few points of the curve, for logs and the app: "T(5)/T(1) = 1.02, T(9)/T(1) = 1.13, T(17)/T(1) = 1.55"."""
        return ", ".join(f"T({n})/T(1) = {self.ratio(n):.2f}" for n in (5, 9, LONGEST_VERIFICATION))

    @property
    def ratios(self) -> list[float]:
        return [self.ratio(n) for n in range(1, len(self.seconds) + 1)]

    def at(self, context: int) -> CostCurve:
        """The curve with `context` tokens cached: linear in the context between the two measured and beyond
        (attention's cost is), the short one up to CONTEXT_TOKENS or where no long one was measured."""
        if self.long_seconds is None or context <= CONTEXT_TOKENS:
            return CostCurve(self.seconds)
        weight = (context - CONTEXT_TOKENS) / (LONG_CONTEXT_TOKENS - CONTEXT_TOKENS)
        return CostCurve(
            tuple(
                non_decreasing(
                    [short + weight * (long - short) for short, long in zip(self.seconds, self.long_seconds)]
                )
            )
        )

    def step_costs(self, context: int, c: float) -> StepCosts:
        """What a speculative step costs behind `context` cached tokens, in one-token target passes there.
        c (a draft pass over a one-token target pass behind CONTEXT_TOKENS, as measured at load) shrinks in
        those units: the target's pass grows with the context much faster than a one-layer draft's does."""
        here = self.at(context)
        return StepCosts(here, c * self.seconds[0] / here.seconds[0])


@dataclass(frozen=True, slots=True)
class StepCosts:
    """A step's costs behind one context length, in one-token target passes at that length (CostCurve.step_costs):
    what sizes a tree, prices the hybrid's head and models a bench step, so that all three count alike."""

    verify: CostCurve  # the curve at this context: verify.ratio(n) is a pass over n tokens
    c: float  # one draft pass

    def step(self, verified_tokens: int, draft_passes: int) -> float:
        """A target pass over verified_tokens (the draft's nodes plus the token fed with them) and the draft's
        passes."""
        return self.verify.ratio(verified_tokens) + draft_passes * self.c


def non_decreasing(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators).

    A pass over more tokens does no less work, so a dip in the medians is timing noise; this keeps
    the noise from making k + 1 = 6 look cheaper than 5. Hand-written: ten lines, and the libraries
    that have it (scikit-learn, scipy >= 1.12) are not runtime dependencies here."""
    blocks: list[list[float]] = []  # [mean, count]
    for value in values:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, count = blocks.pop()
            blocks[-1] = [
                (blocks[-1][0] * blocks[-1][1] + mean * count) / (blocks[-1][1] + count),
                blocks[-1][1] + count,
            ]
    return [mean for mean, count in blocks for _ in range(int(count))]
