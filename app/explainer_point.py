"""The last race on the formula's chart, placed by what was measured.

A race's UI k limits the head's depth only: the hybrid drafts trees and lookup chains up to 16 deep, adaptive k
takes plain passes, so the race's acceptance per drafted node and its k do not predict its tokens per pass. The
point is placed by its own measurements instead, which give its speedup exactly:

    speedup = tokens per target pass x plain seconds per token / mean seconds per target pass

and the formula's a, c and k are fitted to them, so that the formula's curve passes through the measured speedup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec_core import expected_tokens_per_step
from specdec_core.costs import CostCurve
from specdec_core.limits import MEASURED_DRAFT_TOKENS
from specdec_core.tree import depths

from .race import Race

A_MAX = 0.99  # the a slider's range
C_MAX = 1.5  # the c slider's range


@dataclass(frozen=True, slots=True)
class RacePoint:
    """What the speculative side of one race measured, over all its target passes."""

    tokens_per_pass: float  # tokens emitted / target passes (Summary.mean_accepted_length)
    depth: float  # mean draft depth over the target passes; a pass without a draft counts 0
    pass_cost: float  # mean seconds per target pass / the plain side's seconds per token
    speculative_steps: int  # passes that verified a draft
    target_passes: int  # those and the passes without a draft (the prompt's, adaptive k's plain steps)

    @property
    def speedup(self) -> float:
        """The race's measured speedup: both sides' tokens per second on their own clocks."""
        return self.tokens_per_pass / self.pass_cost

    @property
    def k(self) -> int:
        """The draft length the point sits at: the mean depth, rounded, and deep enough for its tokens per pass."""
        deep_enough = math.ceil(self.tokens_per_pass - 1 - 1e-9)
        return min(max(1, round(self.depth), deep_enough), MEASURED_DRAFT_TOKENS)


@dataclass(frozen=True, slots=True)
class Fit:
    """The formula's a, c and k whose curve passes through a race's point."""

    a: float
    c: float
    k: int
    cheap_passes: bool  # the passes cost less than the verification curve says: c is 0 and a is raised to meet


def race_point(race: Race) -> RacePoint | None:
    """The measured point of a race with both sides' tokens timed and at least one draft verified; else None."""
    spec, plain = race.spec, race.plain
    if not race.spec_steps or not spec.clock or not plain.clock or not plain.token_count:
        return None
    passes = len(spec.steps)
    drafted = [max(depths(step.parents)) for step in race.spec_steps]
    return RacePoint(
        tokens_per_pass=spec.token_count / passes,
        depth=sum(drafted) / passes,
        pass_cost=(spec.clock / passes) / (plain.clock / plain.token_count),
        speculative_steps=len(drafted),
        target_passes=passes,
    )


def fit(point: RacePoint, curve: CostCurve | None) -> Fit:
    """a, c, k with S(a, c, k) = the measured speedup, verification priced as the chart prices it (the curve,
    or one pass without one): c is what a pass cost beyond the verification at depth k, per drafted position,
    and a the acceptance per position that then gives the speedup (the measured tokens per pass, unless c was 0)."""
    k = point.k
    verify = curve.ratio(k + 1) if curve else 1.0
    beyond = point.pass_cost - verify
    c = min(round(max(0.0, beyond) / k, 3), C_MAX)
    a = acceptance_for(point.speedup * (verify + k * c), k)
    return Fit(a=round(a, 3), c=c, k=k, cheap_passes=beyond < 0)


def acceptance_for(tokens_per_pass: float, k: int) -> float:
    """The a at which (1 - a^(k+1)) / (1 - a) equals tokens_per_pass, within [0, A_MAX] (it grows with a)."""
    low, high = 0.0, A_MAX
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if expected_tokens_per_step(middle, k) < tokens_per_pass else (low, middle)
    return (low + high) / 2
