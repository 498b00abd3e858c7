"""Run settings as small frozen dataclasses, validated once so the engine never sees absurd values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import SpecDecError
from .limits import MAX_DRAFT_TOKENS, MAX_NEW_TOKENS

MAX_TEMPERATURE = 100.0


def _check_number(name: str, value: object, low: float, high: float, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        expected = "an integer" if integer else "a number"
        raise SpecDecError(f"{name} must be {expected}, got {value!r}.")
    if not low <= value <= high:
        raise SpecDecError(f"{name} must be between {low:g} and {high:g}, got {value!r}.")


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """How a token is chosen from logits; draft and target always share one of these.

    temperature 0 means greedy decoding; top_k 0 and top_p 1 switch those filters off.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check_number("temperature", self.temperature, 0.0, MAX_TEMPERATURE)
        _check_number("top_k", self.top_k, 0, 1_000_000, integer=True)
        _check_number("top_p", self.top_p, 0.0, 1.0)
        if self.top_p == 0.0:
            raise SpecDecError("top_p must be in (0, 1]; 0 would keep no token at all.")
        _check_number("seed", self.seed, 0, 2**63 - 1, integer=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True, slots=True)
class DraftConfig:
    """How many tokens the drafter proposes per step.

    adaptive=True starts at k and lets the schedule move between 0 and max(k, ADAPTIVE_LONGEST) (see schedule.py).
    """

    k: int = 4
    adaptive: bool = False

    def __post_init__(self) -> None:
        _check_number("draft length k", self.k, 1, MAX_DRAFT_TOKENS, integer=True)


@dataclass(frozen=True, slots=True)
class GenerationConfig:
    """Stopping rules and sampling for one run; max_seconds bounds wall time (None: no bound)."""

    max_new_tokens: int = 128
    max_seconds: float | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        _check_number("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS, integer=True)
        if self.max_seconds is not None:
            _check_number("max_seconds", self.max_seconds, 0.001, 24 * 3600)
