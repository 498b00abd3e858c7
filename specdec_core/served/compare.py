"""The same prompt through this engine's n-gram drafter, beside a served model's n-gram speculation.

For the embedded model served elsewhere (vLLM on its converted folder): this engine runs the prompt greedily with
NgramDrafter at the server's k and lookup window, choosing among matches as vLLM does; counts drafts and
acceptances as the server does (metrics.SpecCounters); and compares the two greedy outputs token by token.
Where they part, both tokens' probabilities under this engine's target at that position say whether it is a
near-tie that different kernels may break either way, or a real disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import DraftConfig, GenerationConfig, SamplingConfig
from ..drafters.ngram import NgramDrafter
from ..engine import speculative
from ..events import SpecStep
from ..kv_cache import CachedModel
from ..models import LoadedModel
from ..prompts import encode_prompt, stop_token_ids
from ..stats import generated_tokens
from .metrics import SpecCounters


@dataclass(frozen=True, slots=True)
class Lookup:
    """n-gram speculation's settings, named as vLLM's speculative config names them."""

    num_speculative_tokens: int = 4  # k
    prompt_lookup_max: int = 3
    prompt_lookup_min: int = 1


@dataclass(frozen=True, slots=True)
class Parting:
    """The first position where two greedy outputs differ, and each token's probability there under our target."""

    position: int  # index into the generated tokens
    server_token: int | None  # None: the server's answer ended here
    our_token: int | None  # None: ours ended here
    server_token_prob: float | None
    our_token_prob: float | None


@dataclass(frozen=True, slots=True)
class SideBySide:
    """This engine's n-gram run of one prompt, counted as the server counts, and how its output compares."""

    ours: SpecCounters
    our_tokens: tuple[int, ...]
    server_tokens: tuple[int, ...]
    parting: Parting | None  # None: identical

    @property
    def identical(self) -> bool:
        return self.parting is None


def side_by_side(
    target: LoadedModel, prompt: str, server_tokens: tuple[int, ...], lookup: Lookup, max_tokens: int
) -> SideBySide:
    """The prompt through this engine's n-gram drafter, greedy, at the server's settings; compared with the
    server's greedy tokens (its completion's ids)."""
    prompt_ids = encode_prompt(target.tokenizer, prompt)
    drafter = NgramDrafter(lookup.prompt_lookup_max, lookup.prompt_lookup_min, earliest=True)  # vLLM's choice
    config = GenerationConfig(max_new_tokens=max_tokens, sampling=SamplingConfig(temperature=0.0))
    stops = stop_token_ids(target.tokenizer, target.model)
    draft = DraftConfig(k=lookup.num_speculative_tokens)
    *steps, _ = list(speculative(target.model, drafter, prompt_ids, config, draft, stops))
    ours = tuple(generated_tokens(steps))
    parting = first_parting(target, prompt_ids, ours, tuple(server_tokens))
    return SideBySide(counted(steps, lookup.num_speculative_tokens), ours, tuple(server_tokens), parting)


def counted(steps: list, k: int) -> SpecCounters:
    """Drafts, drafted and accepted tokens, and accepted by position, as vLLM counts them: a draft is a step that
    verified at least one drafted token."""
    drafting = [s for s in steps if isinstance(s, SpecStep) and s.drafted_count]
    return SpecCounters(
        drafts=len(drafting),
        draft_tokens=sum(s.drafted_count for s in drafting),
        accepted=sum(s.accepted_count for s in drafting),
        accepted_by_position=tuple(sum(s.accepted_count > i for s in drafting) for i in range(k)),
    )


def first_parting(
    target: LoadedModel, prompt_ids: list[int], ours: tuple[int, ...], theirs: tuple[int, ...]
) -> Parting | None:
    position = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    if ours == theirs:
        return None
    our_token = ours[position] if position < len(ours) else None
    server_token = theirs[position] if position < len(theirs) else None
    probs = next_token_probs(target, prompt_ids + list(ours[:position]))
    return Parting(position, server_token, our_token, _prob(probs, server_token), _prob(probs, our_token))


def _prob(probs: torch.Tensor, token: int | None) -> float | None:
    return None if token is None or not 0 <= token < len(probs) else float(probs[token])


def next_token_probs(target: LoadedModel, context: list[int]) -> torch.Tensor:
    """The target's next-token distribution after the context [V], from one fresh pass."""
    logits = CachedModel(target.model).forward(context, 1)  # [1, V]
    return torch.softmax(logits[0], dim=-1)


def comparison_record(side: SideBySide, server: SpecCounters | None) -> dict:
    """The side by side's figures by field name, beside a prompt's server figures (prefixed `ours_`); same_counts:
    whether both drafted and accepted alike, position by position."""
    parting = side.parting
    return {
        "same_counts": side.ours == server,
        "ours_drafts": side.ours.drafts,
        "ours_tokens_per_pass": None if side.ours.tokens_per_pass is None else round(side.ours.tokens_per_pass, 3),
        "ours_acceptance_rate": None if side.ours.acceptance_rate is None else round(side.ours.acceptance_rate, 3),
        "ours_acceptance_by_position": [round(a, 3) for a in side.ours.acceptance_by_position],
        "identical": side.identical,
        "parting_position": None if parting is None else parting.position,
        "server_token": None if parting is None else parting.server_token,
        "our_token": None if parting is None else parting.our_token,
        "p_server_token": None if parting is None else parting.server_token_prob,
        "p_our_token": None if parting is None else parting.our_token_prob,
    }
