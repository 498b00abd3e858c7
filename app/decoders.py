"""A race's two decoders, target only and speculative, started from its settings on one prompt.

The race, the workload check and the k sweep all compare the same pair; they differ only in how
they run it (in turns, shown live; or each to its end).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from specdec_core import (
    DraftConfig,
    Event,
    LoadedModel,
    Summary,
    autoregressive,
    encode_prompt,
    generated_tokens,
    load_model,
    make_drafter,
    speculative,
    stop_token_ids,
)
from specdec_core.compile_jobs import keep_in_use

from .inputs import RaceSettings
from .race import PLAIN, SPEC


@dataclass(frozen=True, slots=True)
class PromptedTarget:
    """The loaded target with one prompt encoded for it, and the tokens that end its answer."""

    target: LoadedModel
    prompt_ids: list[int]
    stops: frozenset[int]


def prompted_target(settings: RaceSettings, prompt: str) -> PromptedTarget:
    target = load_model(settings.target)
    keep_in_use(target.model, settings.target)  # compiled passes, where the model cache loaded it again
    prompt_ids = encode_prompt(target.tokenizer, prompt)
    return PromptedTarget(target, prompt_ids, stop_token_ids(target.tokenizer, target.model))


def plain_run(settings: RaceSettings, prompted: PromptedTarget) -> Iterator[Event]:
    return autoregressive(prompted.target.model, prompted.prompt_ids, settings.generation, prompted.stops)


def spec_run(settings: RaceSettings, prompted: PromptedTarget, draft: DraftConfig | None = None) -> Iterator[Event]:
    """The speculative decoder with the settings' drafter, and their draft config unless another is given."""
    drafter = make_drafter(settings.drafter, prompted.target)
    draft = draft or settings.draft
    return speculative(prompted.target.model, drafter, prompted.prompt_ids, settings.generation, draft, prompted.stops)


def both_runs(settings: RaceSettings, prompted: PromptedTarget) -> dict[str, Iterator[Event]]:
    return {PLAIN: plain_run(settings, prompted), SPEC: spec_run(settings, prompted)}


def run_to_end(run: Iterator[Event]) -> tuple[list[int], Summary]:
    """Runs one decoder to the end; returns its tokens and summary."""
    *steps, finished = list(run)
    return generated_tokens(steps), finished.summary
