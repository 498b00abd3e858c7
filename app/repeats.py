"""Repeated timings: the median and the spread (min to max) of each measure, and whether the best of several
settings stands clear of the next best or sits within noise of it.

The spread is min to max, not the interquartile range: a check repeats each measurement 1 to 5 times, too few
for quartiles to mean anything.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spread:
    """One measure over its repeats."""

    median: float
    low: float
    high: float
    repeats: int

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one measurement")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def overlaps(self, other: Spread) -> bool:
        return self.low <= other.high and other.low <= self.high

    def shown(self) -> str:
        """'1.52× (1.48–1.57× over 3 repeats)', or '1.52× (one run)'."""
        if self.repeats == 1:
            return f"{self.median:.2f}× (one run)"
        return f"{self.median:.2f}× ({self.low:.2f}–{self.high:.2f}× over {self.repeats} repeats)"


@dataclass(frozen=True, slots=True)
class Best:
    """The setting with the highest median, and those whose spread overlaps its spread."""

    setting: int
    spread: Spread
    rivals: tuple[tuple[int, Spread], ...]  # within noise of the best, highest median first

    @property
    def certain(self) -> bool:
        return not self.rivals


def best_of(measured: dict[int, Spread]) -> Best:
    """The highest median; every other setting whose spread overlaps its spread is a rival within noise.
    With one repeat a spread is a point, so only an exact tie is within noise: the caller says that one run
    cannot tell noise from a difference."""
    ranked = sorted(measured.items(), key=lambda item: item[1].median, reverse=True)
    (setting, spread), others = ranked[0], ranked[1:]
    return Best(setting, spread, tuple((s, o) for s, o in others if o.overlaps(spread)))


def best_k_line(best: Best) -> str:
    """The k sweep's verdict in one sentence: a best k, or the ks it cannot be told apart from."""
    head = f"Best k = {best.setting}: {best.spread.shown()}"
    if best.spread.repeats == 1:
        return f"{head}. One run per k cannot tell noise from a difference: use 2 or more repeats."
    if best.certain:
        return f"{head}; its spread overlaps no other k's, so it is best beyond this run-to-run noise."
    rivals = ", ".join(f"k = {k} ({spread.shown()})" for k, spread in best.rivals)
    return f"{head}; within noise of {rivals}: their spreads overlap, so no single best k is certain here."
