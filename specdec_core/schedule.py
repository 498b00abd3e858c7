"""Draft length per step: fixed, or adaptive so that text the draft cannot predict costs little.

The adaptive schedule picks the k that the theory says is fastest, using what it has measured
in this run: the acceptance rate a (from a prior that fades), the time of one draft pass, and the
time of a target pass over n tokens at the context's length. On a GPU a pass over 5 tokens costs
about as much as one; on a CPU it does not, so the measured cost per n is used rather than the
textbook 'verification is free'.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .config import DraftConfig
from .costs import CONTEXT_TOKENS, CostCurve
from .events import PlainStep, Step
from .limits import MEASURED_DRAFT_TOKENS
from .theory import expected_tokens_per_step

if TYPE_CHECKING:
    from .drafters.base import Drafter

# drafts that always agree (self-drafts) want long k; the cost model stops it there
ADAPTIVE_LONGEST = MEASURED_DRAFT_TOKENS


class DraftLength(Protocol):
    def next(self, context_tokens: int = CONTEXT_TOKENS) -> int:
        """Tokens to draft in the coming step; 0 means a plain target step (no drafting at all).
        context_tokens: the context's length before the step, where the cost curve is read."""
        ...

    def update(self, step: Step) -> None: ...


class FixedDraftLength:
    def __init__(self, k: int) -> None:
        self.k = k

    def next(self, context_tokens: int = CONTEXT_TOKENS) -> int:
        return self.k

    def update(self, step: Step) -> None:
        pass


class AdaptiveDraftLength:
    """Chooses k in shortest..longest (shortest 0 or 1) to maximise expected tokens per second.

    expected tokens(a, k) = (1 - a^(k+1)) / (1 - a)  (Leviathan et al. 2022)
    expected seconds(k)   = k * draft pass time + target pass time over k + 1 tokens

    Target pass times come from this machine's verification cost curve (tuning.py, measured at
    load, read at each step's context length) scaled by the passes of this run. Without a curve (a
    model loaded some other way), a pass width not measured yet is taken as the cheapest one
    measured, an optimistic guess that makes each k get tried. At k = 0 the draft is not run at all, which is what
    protects creative text; after some plain steps one token is drafted again to see whether the text turned
    predictable. Each failed probe doubles the wait, and a wait is never shorter than what keeps the probes'
    extra cost (the draft's pass and its catch-up, the wider verification) within PROBE_SHARE of the plain
    steps' time.

    c: one draft pass over one single-token target pass as measured at load (tuning.py), or None. Given c, the
    first k is the best one under the acceptance prior rather than `start`, so a draft that costs as
    much as the target (a bfloat16 copy on a CPU without bfloat16 arithmetic) never starts drafting; and a
    draft that could not pay even if every token were accepted is never run at all.
    """

    # Weight of the past in the running estimates (~20 steps of memory): long enough that a few rejections do not
    # drop a draft that pays to one token or none, short enough that drafting turns off within a few steps where
    # nothing is accepted (bench/RESULTS.md, 2026-12-06, commit 118b127).
    DECAY = 0.95
    MIN_GAIN = 1.03
    FIRST_PROBE_WAIT = 4
    LONGEST_PROBE_WAIT = 64
    # The acceptance estimate starts as if two judged tokens had come out half accepted; the prior fades at
    # DECAY per step, so that one unlucky first draft (a = 0) cannot turn drafting off for the whole run, where
    # failed probes would keep it off (bench/RESULTS.md, 2026-12-04, AMD EPYC (AVX-512)).
    PRIOR_JUDGED, PRIOR_ACCEPTED = 2.0, 1.0
    # Probes may cost at most this share of the plain steps' time between them: with the few refused steps it
    # takes to turn drafting off, what keeps a run whose drafts are all refused within 3% of plain decoding.
    PROBE_SHARE = 0.01

    def __init__(
        self,
        start: int,
        longest: int,
        curve: CostCurve | None = None,
        shortest: int = 0,
        c: float | None = None,
        reads_what_it_missed: bool = False,
    ) -> None:
        """shortest: 1 for a drafter that turns its own costly part off (gates_itself): k = 0 would also
        stop it consulting what is free. reads_what_it_missed: the drafter's first draft reads the prompt and a
        probe the tokens of the plain steps before it (a separate draft model: Drafter.reads_what_it_missed)."""
        self.k = max(start, shortest)
        self.longest = longest
        self.shortest = shortest
        self._measured_curve = curve
        self._curve_here = curve  # the measured curve read at the latest context's length
        self._single_pass_seconds: float | None = None  # T(1) of this run, from passes of any width via the curve
        # Decayed draft tokens the target ruled on (the accepted ones plus the first rejected) and accepted,
        # from the prior on.
        self._judged = self.PRIOR_JUDGED
        self._accepted = self.PRIOR_ACCEPTED
        self._draft_pass_seconds: float | None = None
        # the first draft also reads the whole prompt (a head's prefill): its time is not a pass's
        self._seen_first_draft = False
        self._target_pass_seconds: dict[int, float] = {}  # tokens in the pass -> seconds
        self._probe_wait = self.FIRST_PROBE_WAIT
        self._plain_steps = 0
        self._seen_prefill = False
        self._c_at_load = c
        self._reads_what_it_missed = reads_what_it_missed
        self._context = CONTEXT_TOKENS  # the latest step's context length (next)
        self._drafted_until = 0  # the context length the draft last read up to
        # a probe's cost beyond the plain step it replaces, in one-token target passes (None: not known yet)
        self._probe_extra: float | None = None
        if reads_what_it_missed:
            self.k = shortest  # its first draft pays for reading the prompt: it starts as a probe, within budget
        elif c is not None:
            self.k = self._best_k()

    @property
    def acceptance_rate(self) -> float:
        """Per-token acceptance, counting only tokens the target ruled on: drafts after the first
        rejection were never judged, and counting them as rejected would make one unlucky step
        look like a bad draft (the geometric model's estimate, smoothed by the fading prior)."""
        return self._accepted / self._judged

    def next(self, context_tokens: int = CONTEXT_TOKENS) -> int:
        self._context = context_tokens
        if self._measured_curve is not None:
            self._curve_here = self._measured_curve.at(context_tokens)
        if self.k > 0:
            return self.k
        self._plain_steps += 1
        return 1 if self._plain_steps > self._steps_before_probe() else 0

    def _steps_before_probe(self) -> float:
        """Plain steps to take before the next probe: the doubling wait, or more where a probe would cost over
        PROBE_SHARE of the plain steps' time; never for a draft that cannot pay or whose catching up on the
        missed tokens grows faster than that share."""
        costs = self._costs()
        if costs is None:
            return self._probe_wait
        c, ratio = costs
        if not self._could_pay(c, ratio):
            return math.inf
        if self._reads_what_it_missed:
            behind = self._context - self._drafted_until
            extra = c + ratio(2) - 1 + c * ratio(behind)  # the draft's pass over what it missed, priced as ours
            if c * (ratio(behind + 1) - ratio(behind)) >= self.PROBE_SHARE:
                return math.inf
        else:
            extra = self._probe_extra if self._probe_extra is not None else c + ratio(2) - 1
        return max(self._probe_wait, math.ceil(extra / self.PROBE_SHARE))

    def _could_pay(self, c: float, ratio: Callable[[int], float]) -> bool:
        """Whether some k would gain MIN_GAIN over plain decoding if every drafted token were accepted."""
        return any((k + 1) / (k * c + ratio(k + 1)) > self.MIN_GAIN for k in range(1, self.longest + 1))

    def update(self, step: Step) -> None:
        if not self._seen_prefill:  # the first step reads the whole prompt:
            self._seen_prefill = True  # its time says nothing about a decode step
            return
        if isinstance(step, PlainStep):
            self._learn_target_cost(1, step.seconds)
            return
        self._learn_target_cost(step.drafted_count + 1, step.verify_seconds)
        # With a self-gating drafter, k sizes the part that makes draft passes: steps without it say nothing of it.
        if step.drafted_count == 0 or (self.shortest and step.draft_passes == 0):
            return
        probing = self.k == 0
        self._drafted_until = self._context + step.accepted_count  # it read the context and the accepted drafts
        self._judged = self.DECAY * self._judged + step.accepted_count + (step.rejected_token is not None)
        self._accepted = self.DECAY * self._accepted + step.accepted_count
        # A probe's draft first catches up on the plain steps, and the first draft on the prompt: no per-pass cost.
        if not probing and self._seen_first_draft:
            per_pass = step.draft_seconds / max(step.draft_passes, 1)
            self._draft_pass_seconds = self._ema(self._draft_pass_seconds, per_pass)
        self._seen_first_draft = True
        self.k = self._best_k()
        if probing:
            self._plain_steps = 0
            single = self._single_seconds()
            if single:
                self._probe_extra = max(0.0, (step.draft_seconds + step.verify_seconds) / single - 1)
            accepted_probe = step.accepted_count == step.drafted_count
            self._probe_wait = (
                self.FIRST_PROBE_WAIT if accepted_probe else min(2 * self._probe_wait, self.LONGEST_PROBE_WAIT)
            )

    def _best_k(self) -> int:
        costs = self._costs()
        if costs is None:
            return self.k
        c, ratio = costs

        def tokens_per_pass(k: int) -> float:  # per one-token target pass: the order of tokens per second
            return expected_tokens_per_step(self.acceptance_rate, k) / (k * c + ratio(k + 1))

        rates = {k: tokens_per_pass(k) for k in range(self.shortest, self.longest + 1)}
        best = max(rates.values())
        # Draft only for a clear expected gain: with a near 0 the rates differ by timing noise alone.
        if self.shortest == 0 and best <= self.MIN_GAIN * rates[0]:
            return 0
        # Of the k within noise of the best, the shortest: rejections come in clusters (near-ties),
        # not at the geometric model's even rate, so a long draft risks more than it expects to win.
        return next(k for k, rate in rates.items() if rate * self.MIN_GAIN >= best)

    def _costs(self) -> tuple[float, Callable[[int], float]] | None:
        """(c, n -> T(n)/T(1)) at the latest context: c from this run's draft passes, else the one measured at
        load; None while c is unknown."""
        single = self._single_seconds()
        if self._draft_pass_seconds is not None and single:
            c = self._draft_pass_seconds / single
        else:
            c = self._c_at_load
        if c is None:
            return None
        if self._curve_here is not None:
            return c, self._curve_here.ratio
        if single:
            return c, lambda n: self._target_seconds(n) / single
        # Nothing timed yet: verification taken as free, the case most in drafting's favour, so that a draft
        # judged unable to pay here cannot pay anywhere.
        return c, lambda n: 1.0

    def _single_seconds(self) -> float | None:
        """This run's one-token target pass (from passes of any width through the curve, or the cheapest
        measured without one); None before any was measured."""
        if self._curve_here is not None:
            return self._single_pass_seconds
        return self._target_seconds(1) if self._target_pass_seconds else None

    def _target_seconds(self, tokens: int) -> float:
        if self._curve_here is not None:
            return self._single_pass_seconds * self._curve_here.ratio(tokens)
        return self._target_pass_seconds.get(tokens, min(self._target_pass_seconds.values()))

    def _learn_target_cost(self, tokens: int, seconds: float) -> None:
        self._target_pass_seconds[tokens] = self._ema(self._target_pass_seconds.get(tokens), seconds)
        if self._curve_here is not None:
            self._single_pass_seconds = self._ema(self._single_pass_seconds, seconds / self._curve_here.ratio(tokens))

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.DECAY * old + (1 - self.DECAY) * new


def make_schedule(config: DraftConfig, curve: CostCurve | None, drafter: Drafter) -> DraftLength:
    """The drafter's gates_itself: it decides per step whether its costly part runs (the hybrid's head), so
    the adaptive k sizes that part and never turns drafting off; its c_at_load and reads_what_it_missed price
    its first draft and its probes."""
    if config.adaptive:
        return AdaptiveDraftLength(
            start=config.k,
            longest=max(config.k, ADAPTIVE_LONGEST),
            curve=curve,
            shortest=1 if drafter.gates_itself else 0,
            c=drafter.c_at_load,
            reads_what_it_missed=drafter.reads_what_it_missed,
        )
    return FixedDraftLength(config.k)
