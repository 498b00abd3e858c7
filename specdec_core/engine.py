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
from .drafters.base import Draft, Drafter
from .errors import SpecDecError
from .events import Event, Finished, PlainStep, SpecStep, Step
from .kv_cache import CachedModel
from .limits import context_window
from .sampling import Sampler
from .schedule import make_schedule
from .stats import summarize
from .tuning import cost_curve


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
        self.feature_layers: tuple[int, ...] = ()  # the target layers whose outputs the sink reads
        self._pass_start = self._tail = 0  # where the latest target pass began, and its context tokens
        self._features = torch.empty(0)  # [tail + N, H] of the latest pass, for the feature sink
        self.steps: list[Step] = []
        self.generated = 0
        self.stop_reason: str | None = None

    @property
    def remaining(self) -> int:
        return self.budget - self.generated

    def target_pass(self, draft: Draft | None = None) -> torch.Tensor:
        """One target pass over everything it has not seen yet, plus the draft's nodes; probabilities
        [N + 1, V]: row 0 at the last context token, row i + 1 at node i."""
        self._pass_start = start = self.target.length
        tail = self.context[start:]
        self._tail = len(tail)
        nodes = list(draft.tokens) if draft else []
        parents = draft.parents if nodes else None
        if self.feature_sink is None:
            logits = self.target.forward(tail + nodes, len(nodes) + 1, parents)
        else:
            logits, self._features = self.target.forward_with_features(
                tail + nodes, self.feature_layers, len(nodes) + 1, parents
            )
        return self.sampler.probs(logits)

    def compact(self, path: tuple[int, ...] = ()) -> None:
        """After a pass: the target's cache (KV compaction) and a feature drafter keep the context tail
        and the accepted path, in context order; the refused nodes are gone."""
        rows = list(range(self._tail)) + [self._tail + node for node in path]
        self.target.compact(self._pass_start, rows)
        if self.feature_sink is not None:
            self.feature_sink(self._pass_start, self._features[rows])  # [len(rows), H]

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
        probs = self.target_pass()[0]
        self.compact()
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
    if drafter.feature_layers:
        run.feature_sink, run.feature_layers = drafter.observe_features, drafter.feature_layers
    # The curve: measured at load (tuning.py).
    schedule = make_schedule(draft_config, cost_curve(target), drafter)
    # The target reads the prompt alone and gives the first token, as in plain decoding; then the
    # drafter may start from the target's cache instead of reading the prompt again.
    first = run.record(run.plain_step())
    schedule.update(first)
    yield first
    drafter.begin(run.target)
    while run.stop_reason is None:
        # k <= remaining - 1 so that accepted drafts plus the bonus token never exceed the budget.
        k = min(schedule.next(len(run.context)), run.remaining - 1)
        step = _speculative_step(run, drafter, k) if k > 0 else run.plain_step()
        schedule.update(step)
        yield run.record(step)
    yield run.finished()


def _speculative_step(run: _Run, drafter: Drafter, k: int) -> SpecStep:
    # A drafter may go deeper than k (the hybrid while copying): never past the budget.
    draft = drafter.propose(run.context, k, run.sampler).truncated(run.remaining - 1)
    started = time.perf_counter()
    target_probs = run.target_pass(draft)  # [N + 1, V]
    tokens = torch.tensor(draft.tokens, dtype=torch.long)
    verdict = verify(tokens, draft.probs, target_probs, run.sampler, draft.parents, draft.confidence)
    # KV compaction, then rollback: the target cache keeps the context minus its newest token (fed
    # next step); refused nodes are dropped without recomputing anything.
    run.compact(verdict.path)
    emitted = run.emit([draft.tokens[node] for node in verdict.path] + [verdict.next_token])
    run.target.rollback(len(run.context) - 1)
    drafter.observe(verdict.accepted_count)
    return SpecStep(
        draft_tokens=draft.tokens,
        parents=draft.parents,
        path=verdict.path,
        draft_probs=verdict.draft_token_probs,
        target_probs=verdict.target_token_probs,
        accept_probs=verdict.accept_probs,
        rule=verdict.rule,
        sources=draft.sources,
        judgements=verdict.judgements,
        next_token=verdict.next_token,
        next_token_prob=verdict.next_token_prob,
        emitted_tokens=emitted,
        draft_passes=draft.passes,
        draft_seconds=draft.seconds,
        verify_seconds=time.perf_counter() - started,
    )
