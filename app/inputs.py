"""Raw inputs turned into a race's settings, and core errors turned into messages.

Inputs arrive from the browser or from the API as whatever the caller sent, so each is converted
and checked here. Any SpecDecError becomes a gr.Error: a message in the UI that leaves the app working.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import gradio as gr

from specdec_core import DraftConfig, GenerationConfig, SamplingConfig, SpecDecError

from .limits import MAX_K, MAX_NEW_TOKENS, RUN_SECONDS


@dataclass(frozen=True, slots=True)
class RaceSettings:
    target: str
    drafter: str
    generation: GenerationConfig
    draft: DraftConfig


def number(name: str, value: object, integer: bool = False) -> float | int:
    """value as a number (a whole one where integer), or a SpecDecError naming the input."""
    try:
        parsed = float(value)
    except (TypeError, ValueError):
        raise SpecDecError(f"{name} must be a number, got {value!r}.") from None
    if integer:
        if parsed != int(parsed):
            raise SpecDecError(f"{name} must be a whole number, got {value!r}.")
        return int(parsed)
    return parsed


def parse_settings(
    target: str,
    drafter: str,
    k: object,
    adaptive: object,
    decoding: str,
    temperature: object,
    top_k: object,
    top_p: object,
    seed: object,
    max_new_tokens: object,
) -> RaceSettings:
    tokens = number("max new tokens", max_new_tokens, integer=True)
    if tokens > MAX_NEW_TOKENS:
        raise SpecDecError(f"max new tokens is limited to {MAX_NEW_TOKENS} here, got {tokens}.")
    draft_length = number("draft length k", k, integer=True)
    if draft_length > MAX_K:
        raise SpecDecError(f"draft length k is limited to {MAX_K} here, got {draft_length}.")
    if decoding not in ("greedy", "sampling"):
        raise SpecDecError(f"decoding must be 'greedy' or 'sampling', got {decoding!r}.")
    sampling = SamplingConfig(
        temperature=0.0 if decoding == "greedy" else number("temperature", temperature),
        top_k=number("top-k", top_k, integer=True),
        top_p=number("top-p", top_p),
        seed=number("seed", seed, integer=True),
    )
    if decoding == "sampling" and sampling.temperature == 0:
        raise SpecDecError("Sampling needs a temperature above 0 (or choose greedy).")
    return RaceSettings(
        target=target,
        drafter=drafter,
        generation=GenerationConfig(max_new_tokens=tokens, max_seconds=RUN_SECONDS, sampling=sampling),
        draft=DraftConfig(k=draft_length, adaptive=bool(adaptive)),
    )


@contextmanager
def shown_as_message() -> Iterator[None]:
    """A SpecDecError raised inside becomes a gr.Error, which Gradio shows the visitor (or the API caller)."""
    try:
        yield
    except SpecDecError as error:
        raise gr.Error(str(error)) from None
