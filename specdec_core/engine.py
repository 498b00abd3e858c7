"""The two decoders: target-only and speculative, both generators of per-step events.

The engine knows token ids only (tokenizing and chat templates live in prompts.py). Both
decoders share one `_Run`: the target's cache, the sampler, the stop rules and the clock,
so that the only difference between them is the step itself. Closing the generator
(`gen.close()`, or a Gradio cancel) stops work at the next step boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator

import torch
from transformers import PreTrainedModel

from .acceptance import verify
from .config import DraftConfig, GenerationConfig
from .drafters.base import Drafter
from .errors import SpecDecError
from .events import Event, Finished, PlainStep, SpecStep, Step
from .kv_cache import CachedModel
from .sampling import Sampler
from .schedule import make_schedule
from .stats import summarize
from .tuning import cost_curve


def context_window(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_position_embeddings", 0) or 2048)


class _Run:
    """State shared by both decoders: context, target cache, sampler, stop rules and the step log."""

    def __init__(
        self,
        target: PreTrainedModel,
        prompt_ids: list[int],
        config: GenerationConfig,
        stop_token_ids: Collection[int],
    ) -> None:
        window = context_window(target)
        if not prompt_ids:
            raise SpecDecError("The prompt is empty: type something for the model to continue.")
        if len(prompt_ids) >= window:
            raise SpecDecError(
                f"The prompt is {len(prompt_ids)} tokens long; this model's context window holds {window}. "
                "Shorten the prompt."
            )
        self.target = CachedModel(target)
        self.sampler = Sampler(config.sampling)
        self.context = list(prompt_ids)
        self.stop_token_ids = frozenset(stop_token_ids)
        # Never generate past the context window; never overshoot the budget (bonus token included).
        self.budget = min(config.max_new_tokens, window - len(prompt_ids))
        self.budget_reason = "max_new_tokens" if self.budget == config.max_new_tokens else "context_full"
        self.deadline = None if config.max_seconds is None else time.perf_counter() + config.max_seconds
        # Set by speculative() for a drafter that reads the target's hidden states (drafters/eagle.py).
        self.feature_sink: Callable[[int, torch.Tensor], None] | None = None
        self.steps: list[Step] = []
        self.generated = 0
        self.stop_reason: str | None = None

    @property
    def remaining(self) -> int:
        return self.budget - self.generated

    def target_probs(self, new_tokens: list[int], positions: int) -> torch.Tensor:
        """One target pass over everything it has not seen yet; probabilities [positions, V]."""
        start = self.target.length
        feed = self.context[start:] + new_tokens
        if self.feature_sink is None:
            return self.sampler.probs(self.target.forward(feed, logits_to_keep=positions))
        logits, features = self.target.forward_with_features(feed, logits_to_keep=positions)
        self.feature_sink(start, features)  # [len(feed), H] for positions start..; the rejected ones get overwritten
        return self.sampler.probs(logits)

    def emit(self, tokens: list[int]) -> tuple[int, ...]:
        """Appends tokens to the context, cut after an end token or at the budget."""
        kept: list[int] = []
        for token in tokens[: self.remaining]:
            kept.append(token)
            if token in self.stop_token_ids:
                self.stop_reason = "eos"
                break
        self.context.extend(kept)
        self.generated += len(kept)
        if self.stop_reason is None and self.remaining <= 0:
            self.stop_reason = self.budget_reason
        return tuple(kept)

    def record(self, step: Step) -> Step:
        self.steps.append(step)
        if self.stop_reason is None and self.deadline is not None and time.perf_counter() > self.deadline:
            self.stop_reason = "time_limit"
        return step

    def plain_step(self) -> PlainStep:
        started = time.perf_counter()
        probs = self.target_probs([], positions=1)[0]
        token = self.sampler.pick(probs)
        emitted = self.emit([token])
        return PlainStep(token, float(probs[token]), time.perf_counter() - started, emitted)

    def finished(self) -> Finished:
        return Finished(summarize(self.steps, self.stop_reason or "cancelled"))


def autoregressive(
    target: PreTrainedModel,
    prompt_ids: list[int],
    config: GenerationConfig,
    stop_token_ids: Collection[int] = (),
) -> Iterator[Event]:
    """Plain decoding: one target pass per token."""
    run = _Run(target, prompt_ids, config, stop_token_ids)
    while run.stop_reason is None:
        yield run.record(run.plain_step())
    yield run.finished()


def speculative(
    target: PreTrainedModel,
    drafter: Drafter,
    prompt_ids: list[int],
    config: GenerationConfig,
    draft_config: DraftConfig = DraftConfig(),
    stop_token_ids: Collection[int] = (),
) -> Iterator[Event]:
    """Speculative decoding: the drafter proposes up to k tokens, one target pass verifies them all."""
    run = _Run(target, prompt_ids, config, stop_token_ids)
    run.feature_sink = getattr(drafter, "observe_features", None)
    schedule = make_schedule(draft_config, cost_curve(target))  # the curve: measured at load (tuning.py)
    # The target reads the prompt alone and gives the first token, as in plain decoding; then the
    # drafter may start from the target's cache instead of reading the prompt again.
    first = run.record(run.plain_step())
    schedule.update(first)
    yield first
    drafter.begin(run.target)
    while run.stop_reason is None:
        # k <= remaining - 1 so that accepted drafts plus the bonus token never exceed the budget.
        k = min(schedule.next(), run.remaining - 1)
        step = _speculative_step(run, drafter, k) if k > 0 else run.plain_step()
        schedule.update(step)
        yield run.record(step)
    yield run.finished()


def _speculative_step(run: _Run, drafter: Drafter, k: int) -> SpecStep:
    draft = drafter.propose(run.context, k, run.sampler)
    started = time.perf_counter()
    draft_tokens = list(draft.tokens)
    target_probs = run.target_probs(draft_tokens, positions=len(draft_tokens) + 1)  # [k + 1, V]
    verdict = verify(torch.tensor(draft_tokens, dtype=torch.long), draft.probs, target_probs, run.sampler)
    emitted = run.emit(draft_tokens[: verdict.accepted_count] + [verdict.next_token])
    # KV rollback: the target cache keeps the context minus its newest token (fed next step);
    # the rejected drafts behind it are dropped without recomputing anything.
    run.target.rollback(len(run.context) - 1)
    drafter.observe(verdict.accepted_count)
    return SpecStep(
        draft_tokens=draft.tokens,
        draft_probs=verdict.draft_token_probs,
        target_probs=verdict.target_token_probs,
        accept_probs=verdict.accept_probs,
        accepted_count=verdict.accepted_count,
        next_token=verdict.next_token,
        next_token_prob=verdict.next_token_prob,
        emitted_tokens=emitted,
        draft_passes=draft.passes,
        draft_seconds=draft.seconds,
        verify_seconds=time.perf_counter() - started,
    )
