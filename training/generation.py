"""Batched generation of token ids with transformers' `generate`: the one place the corpus decodes.

Every stage of the corpus (user turns, articles, first answers, responses) is "continue these
prompts", so they share this: left padding so every continuation starts at the same column, one
temperature per batch, and each continuation cut after its first stop token (kept: the head
learns to draft the end of a turn too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria, StoppingCriteriaList


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float  # 0 = greedy
    top_p: float = 1.0  # 1 = the target's full distribution (on-policy)
    max_new_tokens: int = 256
    # The share of a batch's rows that must end their turn before the whole batch stops. Below 1
    # the few longest rows, which keep every row computing, are cut (and come back unfinished):
    # for user turns and articles, never for answers, whose lengths the corpus must keep.
    quorum: float = 1.0
    # Stop a row once it loops (_Loops): for user turns and articles, whose looping tails the quality
    # filter cuts or drops anyway, never for answers, where a loop is the target's own behaviour.
    stop_loops: bool = False


@dataclass(frozen=True, slots=True)
class Continuation:
    ids: list[int]  # the generated ids, through the first stop token when there is one
    finished: bool  # a stop token ended it (not max_new_tokens)


def encode_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], open_role: str = "assistant") -> list[int]:
    """The conversation in the chat template, opened for `open_role`'s next turn.

    The default system prompt stays implicit (the template adds it), as when the app serves the
    prompt. A user turn is opened by cutting a rendered placeholder turn at its content: the
    header comes from the template itself, not from a hard-coded string."""
    if open_role == "assistant":
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
    marker = "\x00"
    rendered = tokenizer.apply_chat_template([*messages, {"role": open_role, "content": marker}], tokenize=False)
    return tokenizer(rendered[: rendered.index(marker)], add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    prompts: list[list[int]],
    sampling: Sampling,
    stops: list[int],
    cache_implementation: str | None = None,
) -> list[Continuation]:
    """The model's continuations of a batch of prompts (greedy at temperature 0)."""
    pad = stops[0]
    width = max(len(ids) for ids in prompts)
    device = model.device
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts], device=device)
    mask = (torch.arange(width, device=device)[None, :] >= torch.tensor([width - len(ids) for ids in prompts], device=device)[:, None]).long()
    if sampling.temperature:
        # top_k=0 and top_p=1 skip the vocabulary sort: the full distribution, as served at that temperature.
        mode = {"do_sample": True, "temperature": sampling.temperature, "top_k": 0, "top_p": sampling.top_p}
    else:
        mode = {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
    loops = _Loops(width, len(prompts)) if sampling.stop_loops else None
    criteria = StoppingCriteriaList([c for c in (loops, _Quorum(width, stops, sampling.quorum) if sampling.quorum < 1 else None) if c])
    out = model.generate(
        input_ids=input_ids, attention_mask=mask, max_new_tokens=sampling.max_new_tokens, eos_token_id=stops,
        pad_token_id=pad, cache_implementation=cache_implementation, stopping_criteria=criteria, **mode,
    )
    # A row stopped for a loop is padded with stops[0] after it: cut there (unfinished). A row that ended
    # is padded too, and its run of pads counts as a loop, but it is cut at its own stop token first.
    ends = loops.ends if loops else [None] * len(prompts)
    return [_cut(row[:end], set(stops)) for row, end in zip(out[:, width:].tolist(), ends)]


class _Quorum(StoppingCriteria):
    """Stops every row once `share` of the rows have produced a stop token."""

    def __init__(self, width: int, stops: list[int], share: float) -> None:
        self.width, self.stops, self.share = width, torch.tensor(stops), share

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        ended = torch.isin(input_ids[:, self.width :], self.stops.to(input_ids.device)).any(dim=1)
        return torch.full_like(ended, bool(ended.float().mean() >= self.share))


class _Loops(StoppingCriteria):
    """Stops each row whose last WINDOW generated tokens have already appeared REPEATS times in its
    continuation: a sampled small model that loops on long text never leaves the loop (the corpus's
    articles at temperature 0.8: 196 of 288 ran to 1,500 tokens, every one of them looping, most
    from a few hundred tokens on). `ends[row]` is the row's length when it was stopped, else None."""

    WINDOW, REPEATS = 16, 3  # 16 tokens ~ 12 words: stricter than the quality filter's 8-word loop test

    def __init__(self, width: int, rows: int) -> None:
        self.width = width
        self.ends: list[int | None] = [None] * rows

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        generated = input_ids[:, self.width :]
        if generated.shape[1] < self.WINDOW * self.REPEATS:
            return torch.zeros(generated.shape[0], dtype=torch.bool, device=input_ids.device)
        windows = generated.unfold(1, self.WINDOW, 1)  # [rows, positions, WINDOW], a view
        seen = (windows == windows[:, -1:]).all(dim=-1).sum(dim=1)
        looping = seen >= self.REPEATS
        for row in looping.nonzero().flatten().tolist():
            if self.ends[row] is None:
                self.ends[row] = generated.shape[1]
        return looping


def _cut(ids: list[int], stops: set[int]) -> Continuation:
    for i, token in enumerate(ids):
        if token in stops:
            return Continuation(ids[: i + 1], True)
    return Continuation(ids, False)


def free_cores() -> int:
    """CPU cores not busy with other work (by the 1-minute load average), at least one: decoding
    with more threads than free cores makes every OpenMP barrier wait for a descheduled thread.
    Measured on 2 shared cores (load about 3): 1 thread 110 response tokens/s, 2 threads 22."""
    return max(1, (os.cpu_count() or 1) - round(os.getloadavg()[0]))
