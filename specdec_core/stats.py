"""Summaries computed from events, so that every number shown can be traced back to the steps."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from .events import Event, Finished, SpecStep, Step, Summary
from .tree import depths


def generated_tokens(events: Iterable[Event]) -> list[int]:
    """The tokens a run emitted, in order (steps or a whole event stream; Finished carries none)."""
    return [t for e in events if not isinstance(e, Finished) for t in e.emitted_tokens]


def summarize(steps: Iterable[Step], stop_reason: str) -> Summary:
    steps = list(steps)
    spec_steps = [s for s in steps if isinstance(s, SpecStep) and s.drafted_count]
    longest = max((s.drafted_count for s in spec_steps), default=0)
    counts = [0] * (longest + 1) if spec_steps else []
    for s in spec_steps:
        counts[s.accepted_count] += 1
    return Summary(
        tokens=sum(len(s.emitted_tokens) for s in steps),
        target_passes=len(steps),
        draft_passes=sum(s.draft_passes for s in steps),
        drafted=sum(s.drafted_count for s in steps),
        accepted=sum(s.accepted_count for s in steps),
        seconds=sum(s.seconds for s in steps),
        stop_reason=stop_reason,
        accepted_length_counts=tuple(counts),
    )


def per_position_acceptance(steps: Iterable[Step]) -> list[float]:
    """Acceptance at draft depth i: steps whose accepted path reached depth i / steps that drafted
    that deep. For a chain, depth is position: accepted at i / drafted at i."""
    drafted: list[int] = []
    accepted: list[int] = []
    for s in steps:
        for i in range(max(depths(s.parents), default=0) if isinstance(s, SpecStep) else 0):
            if i == len(drafted):
                drafted.append(0)
                accepted.append(0)
            drafted[i] += 1
            accepted[i] += i < s.accepted_count
    return [a / d for a, d in zip(accepted, drafted)]


def draft_pass_seconds(steps: Sequence[Step]) -> list[float]:
    """Seconds per draft pass of each drafting step of one run, but the first: a drafter's first pass
    reads the whole prompt (or catches up on it), so it says nothing about a decode step."""
    drafting = [s for s in steps if isinstance(s, SpecStep) and s.draft_passes]
    return [s.draft_seconds / s.draft_passes for s in drafting[1:]]


def plain_step_seconds(steps: Sequence[Step]) -> list[float]:
    """Seconds of each single-token target step of one run, the first (prefill) left out."""
    return [s.seconds for s in steps[1:] if not s.drafted_count]


def c_in_run(draft_passes: Sequence[float], plain_steps: Sequence[float]) -> float | None:
    """c, draft pass over target pass: the median draft pass over the median single-token target step (medians: a pass
    that lands on a busy moment of a shared CPU moves a mean, not a median); None without both."""
    if not draft_passes or not plain_steps:
        return None
    return statistics.median(draft_passes) / statistics.median(plain_steps)
