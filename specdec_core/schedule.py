"""Draft length per step: fixed, or adaptive so that text the draft cannot predict costs little.

The adaptive schedule picks the k that the theory says is fastest, using what it has measured
in this run: the acceptance rate a (from a prior that fades), the time of one draft pass, and the
time of a target pass over n tokens at the context's length. On a GPU a pass over 5 tokens costs
about as much as one; on a CPU it does not, so the measured cost per n is used rather than the
textbook 'verification is free'.
"""

from __future__ import annotations

from typing import Protocol

from .config import DraftConfig
from .costs import CONTEXT_TOKENS, CostCurve
from .events import PlainStep, Step
from .limits import MEASURED_DRAFT_TOKENS
from .theory import expected_tokens_per_step

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
    protects creative text; after `probe_wait` plain steps one token is drafted again to see
    whether the text turned predictable, and each failed probe doubles the wait.
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

    def __init__(self, start: int, longest: int, curve: CostCurve | None = None, shortest: int = 0) -> None:
        """shortest: 1 for a drafter that turns its own costly part off (gates_itself): k = 0 would also
        stop it consulting what is free."""
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

    @property
    def acceptance_rate(self) -> float:
        """Per-token acceptance, counting only tokens the target ruled on: drafts after the first
        rejection were never judged, and counting them as rejected would make one unlucky step
        look like a bad draft (the geometric model's estimate, smoothed by the fading prior)."""
        return self._accepted / self._judged

    def next(self, context_tokens: int = CONTEXT_TOKENS) -> int:
        if self._measured_curve is not None:
            self._curve_here = self._measured_curve.at(context_tokens)
        if self.k > 0:
            return self.k
        self._plain_steps += 1
        return 1 if self._plain_steps > self._probe_wait else 0

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
            accepted_probe = step.accepted_count == step.drafted_count
            self._probe_wait = (
                self.FIRST_PROBE_WAIT if accepted_probe else min(2 * self._probe_wait, self.LONGEST_PROBE_WAIT)
            )

    def _best_k(self) -> int:
        if not self._target_pass_seconds or self._draft_pass_seconds is None:
            return self.k

        def tokens_per_second(k: int) -> float:
            seconds = k * self._draft_pass_seconds + self._target_seconds(k + 1)
            return expected_tokens_per_step(self.acceptance_rate, k) / seconds

        rates = {k: tokens_per_second(k) for k in range(self.shortest, self.longest + 1)}
        best = max(rates.values())
        # Draft only for a clear expected gain: with a near 0 the rates differ by timing noise alone.
        if self.shortest == 0 and best <= self.MIN_GAIN * rates[0]:
            return 0
        # Of the k within noise of the best, the shortest: rejections come in clusters (near-ties),
        # not at the geometric model's even rate, so a long draft risks more than it expects to win.
        return next(k for k, rate in rates.items() if rate * self.MIN_GAIN >= best)

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


def make_schedule(config: DraftConfig, curve: CostCurve | None = None, gates_itself: bool = False) -> DraftLength:
    """gates_itself: the drafter decides per step whether its costly part runs (the hybrid's head), so
    the adaptive k sizes that part and never turns drafting off."""
    if config.adaptive:
        return AdaptiveDraftLength(
            start=config.k, longest=max(config.k, ADAPTIVE_LONGEST), curve=curve, shortest=1 if gates_itself else 0
        )
    return FixedDraftLength(config.k)
