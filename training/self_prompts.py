"""User turns written by the target itself (Magpie, Xu et al. 2024, arXiv 2406.08464).

An instruct model given its chat template up to the start of a user turn writes a plausible user
message: what its own training taught it people ask. The system prompt (varied, per family) and
optionally the message's first words (an opening such as "How do I") steer it across the kinds
of requests; sampling at T = 1 with top-p 0.95 keeps it varied without the tail's nonsense. The
same trick on a conversation [user, the target's answer] gives a second user turn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from training.generation import encode_chat

TEMPERATURE, TOP_P = 1.0, 0.95


@dataclass(frozen=True, slots=True)
class UserTurnRequest:
    family: str
    system: str | None  # None: the template's default system prompt
    opening: str  # the message's first words, "" when the target starts it itself


def first_turn_requests(
    seeds: dict, count: int, rng: random.Random, opening_share: float = 0.7
) -> list[UserTurnRequest]:
    """Families drawn by seeds["magpie_weights"]; a generic or a family system prompt; an opening for most."""
    weights = seeds["magpie_weights"]
    families = rng.choices(sorted(weights), [weights[f] for f in sorted(weights)], k=count)
    systems = seeds["system_prompts"]
    requests = []
    for family in families:
        system = rng.choice(systems["any"] + systems[family])
        opening = rng.choice(seeds["openings"][family]) if rng.random() < opening_share else ""
        requests.append(UserTurnRequest(family, system, opening))
    return requests


def pre_query(
    tokenizer: PreTrainedTokenizerBase, request: UserTurnRequest, conversation: list[dict[str, str]] | None = None
) -> list[int]:
    """The template through the user turn's header (after the conversation so far), then the opening."""
    system = [{"role": "system", "content": request.system}] if request.system is not None else []
    ids = encode_chat(tokenizer, [*system, *(conversation or [])], open_role="user")
    return ids + _opening_ids(tokenizer, request)


def user_text(tokenizer: PreTrainedTokenizerBase, request: UserTurnRequest, generated: list[int]) -> str:
    """The user message: the opening, then what the target wrote after it (decoded together, so
    the tokenizer decides the space between them)."""
    return tokenizer.decode(_opening_ids(tokenizer, request) + generated, skip_special_tokens=True).strip()


def _opening_ids(tokenizer: PreTrainedTokenizerBase, request: UserTurnRequest) -> list[int]:
    return tokenizer(request.opening, add_special_tokens=False)["input_ids"] if request.opening else []
