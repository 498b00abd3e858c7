"""Two decoders, one CPU: run them in turn, step by step, each on its own clock.

On a 2-core machine two generations running at once would slow each other down and make
any timing meaningless. Instead the race advances whichever decoder has used less compute
so far, one step at a time. Each pane is charged only the time of its own steps, and since
the one behind always goes next, both panes show where each decoder would be at the same
moment of its own clock. Nothing here knows about Gradio.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from specdec_core import Event, Finished, SpecStep, Summary, generated_tokens
from specdec_core.events import Step
from specdec_core.stats import c_in_run, draft_pass_seconds, plain_step_seconds

PLAIN = "plain"
SPEC = "spec"


def interleave(runs: dict[str, Iterator[Event]]) -> Iterator[tuple[str, Event]]:
    """Yields (side, event), always advancing the side whose own clock is behind."""
    clocks = dict.fromkeys(runs, 0.0)
    live = dict(runs)
    try:
        while live:
            side = min(live, key=clocks.__getitem__)
            try:
                event = next(live[side])
            except StopIteration:
                del live[side]
                continue
            if not isinstance(event, Finished):
                clocks[side] += event.seconds
            yield side, event
    finally:  # a cancelled race stops both decoders at once
        for run in runs.values():
            run.close()


@dataclass
class Pane:
    """What one decoder has produced so far (app-side and mutable, unlike the core's events)."""

    steps: list[Step] = field(default_factory=list)
    clock: float = 0.0  # compute seconds of its own steps
    summary: Summary | None = None
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (clock, tokens so far)

    def add(self, event: Event) -> None:
        if isinstance(event, Finished):
            self.summary = event.summary
            return
        self.steps.append(event)
        self.clock += event.seconds
        self.timeline.append((self.clock, self.token_count))

    @property
    def tokens(self) -> list[int]:
        return generated_tokens(self.steps)

    @property
    def token_count(self) -> int:
        return sum(len(s.emitted_tokens) for s in self.steps)

    @property
    def tokens_per_second(self) -> float:
        return self.token_count / self.clock if self.clock else 0.0


@dataclass
class Race:
    """Both panes of one race plus what the explainer needs afterwards."""

    greedy: bool
    k: int
    plain: Pane = field(default_factory=Pane)
    spec: Pane = field(default_factory=Pane)

    def add(self, side: str, event: Event) -> None:
        (self.plain if side == PLAIN else self.spec).add(event)

    @property
    def spec_steps(self) -> list[SpecStep]:
        return [s for s in self.spec.steps if isinstance(s, SpecStep) and s.drafted_count]

    @property
    def speedup(self) -> float | None:
        """Tokens per second of speculative over plain, both on their own clocks."""
        if not self.plain.tokens_per_second or not self.spec.tokens_per_second:
            return None
        return self.spec.tokens_per_second / self.plain.tokens_per_second

    @property
    def acceptance_rate(self) -> float | None:
        drafted = sum(s.drafted_count for s in self.spec_steps)
        return sum(s.accepted_count for s in self.spec_steps) / drafted if drafted else None

    @property
    def c(self) -> float | None:
        """c: one draft pass over one plain target step, from this race's own timings."""
        return c_in_run(draft_pass_seconds(self.spec.steps), plain_step_seconds(self.plain.steps))

    @property
    def identical(self) -> bool | None:
        """Greedy outputs must be token-identical; None while running or when sampling."""
        if not self.greedy or self.plain.summary is None or self.spec.summary is None:
            return None
        return self.plain.tokens == self.spec.tokens
