"""Batched generation of token ids: the one place the corpus decodes.

Every stage of the corpus (user turns, articles, first answers, responses) is "continue these
prompts", so they share this: left padding so every continuation starts at the same column, one
temperature per batch, and each continuation cut after its first stop token (kept: the head
learns to draft the end of a turn too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import (
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from specdec_core.kv_cache import growing_cache
from specdec_core.measurements import other_cores_busy


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float  # 0 = greedy
    top_p: float = 1.0  # 1 = the target's full distribution (on-policy)
    max_new_tokens: int = 256
    # The share of a batch's rows that must have left it (ended their turn, or looped with stop_loops)
    # before the whole batch stops. Below 1 the few longest rows, which keep the batch computing, are
    # cut (and come back unfinished): for user turns and articles, never for answers, whose lengths the
    # corpus must keep.
    quorum: float = 1.0
    # Stop a row once it loops (_looping): for user turns and articles, whose looping tails the quality
    # filter cuts or drops anyway, never for answers, where a loop is the target's own behaviour.
    stop_loops: bool = False


@dataclass(frozen=True, slots=True)
class Continuation:
    ids: list[int]  # the generated ids, through the first stop token when there is one
    finished: bool  # a stop token ended it (not max_new_tokens)
    # With keep_features: [prompt + ids, hidden] float16, the target's last layer (before the final norm) at
    # every position, as the decoding made it. The last row stays zero: the last token is never fed back,
    # and training never reads it (train_head.collate: entry j reads positions <= j + 1 < T - 1).
    features: torch.Tensor | None = None


def encode_chat(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], open_role: str = "assistant"
) -> list[int]:
    """The conversation in the chat template, opened for `open_role`'s next turn.

    The default system prompt stays implicit (the template adds it), as when the app serves the
    prompt. A user turn is opened by cutting a rendered placeholder turn at its content: the
    header comes from the template itself, not from a hard-coded string."""
    if open_role == "assistant":
        return list(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
    marker = "\x00"
    rendered = tokenizer.apply_chat_template([*messages, {"role": open_role, "content": marker}], tokenize=False)
    return tokenizer(rendered[: rendered.index(marker)], add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def generate(
    model: PreTrainedModel, prompts: list[list[int]], sampling: Sampling, stops: list[int], keep_features: bool = False
) -> list[Continuation]:
    """The model's continuations of a batch of prompts (greedy at temperature 0), with the features the
    decoding made when keep_features (Continuation.features).

    Written as a loop rather than with transformers' `generate` for one reason: `generate` keeps a
    row that has ended in the batch, computing pads, until the last row ends, and a batch of answers
    of 1-256 tokens spends much of its time on rows that have ended. Here a row leaves the batch when
    it ends (batch_select_indices). The forward, the position ids from the padding mask and the
    temperature warper are transformers' own, the cache is its DynamicCache with layers that grow in
    place (kv_cache.GrowingLayer) and the top-p cut its warper's rule found faster (NucleusWarper);
    greedy rows are `generate`'s tokens (tests/training/test_shards.py)."""
    with _LastHidden(model, len(prompts), max(map(len, prompts)) + sampling.max_new_tokens, keep_features) as tape:
        continuations = _decode(model, prompts, sampling, stops, tape)
    return continuations


def _decode(
    model: PreTrainedModel, prompts: list[list[int]], sampling: Sampling, stops: list[int], tape: _LastHidden
) -> list[Continuation]:
    device, rows = model.device, len(prompts)
    width = max(len(ids) for ids in prompts)
    step_ids = torch.tensor([[stops[0]] * (width - len(ids)) + ids for ids in prompts], device=device)
    mask = (
        torch.arange(width, device=device)[None, :]
        >= torch.tensor([width - len(ids) for ids in prompts], device=device)[:, None]
    ).long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # Appending into buffers with room: DynamicCache's concatenation copied every row's whole cache each
    # step, 29% of an article batch's step (96 rows growing to ~700 tokens, 2 AVX2 cores, py-spy).
    cache = growing_cache(model)
    warpers = _warpers(sampling)
    stop_ids = torch.tensor(stops, device=device)
    generated = torch.full((rows, sampling.max_new_tokens), stops[0], dtype=torch.long, device=device)
    lengths = torch.zeros(rows, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    live = torch.arange(rows, device=device)  # the live rows' places in `prompts`
    for step in range(sampling.max_new_tokens):
        logits = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits
        tape.record(live, 0 if step == 0 else width + step - 1)  # the prompts' columns, then the token fed
        tokens = _pick(logits[:, -1].float(), warpers)
        generated[live, step], lengths[live] = tokens, step + 1
        ended = torch.isin(tokens, stop_ids)
        finished[live] = ended
        leaving = ended | _looping(generated[live, : step + 1]) if sampling.stop_loops else ended
        if rows - len(live) + int(leaving.sum()) >= sampling.quorum * rows:
            break  # every row has left, or enough of them (a looping row counts as ended)
        if leaving.any():
            keep = (~leaving).nonzero().flatten()
            cache.batch_select_indices(keep)
            live, tokens, mask, positions = live[keep], tokens[keep], mask[keep], positions[keep]
        step_ids, positions = tokens[:, None], positions[:, -1:] + 1
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
    return [
        Continuation(
            generated[i, : lengths[i]].tolist(),
            bool(finished[i]),
            tape.row(i, width - len(prompts[i]), width + int(lengths[i])),
        )
        for i in range(rows)
    ]


class _LastHidden:
    """The input of the target's final norm at every position the decoding feeds, per row and column of the
    left-padded batch (prompt columns, then one per generated token): the features the draft head trains on
    (draft_data.hidden_states' last layer), kept as they are made. Recomputing them later from the ids is a
    teacher-forced pass over every prompt and answer: on a 2-core AVX2 CPU in float32 about as long as the
    generation of the answers itself. Off (keep=False), it holds nothing."""

    def __init__(self, model: PreTrainedModel, rows: int, columns: int, keep: bool) -> None:
        self.norm = model.base_model.norm if keep else None
        self.rows = torch.zeros(rows, columns, model.config.hidden_size, dtype=torch.float16) if keep else None
        self.seen: torch.Tensor | None = None
        self.hook: torch.utils.hooks.RemovableHandle | None = None

    def __enter__(self) -> _LastHidden:
        if self.norm is not None:
            self.hook = self.norm.register_forward_pre_hook(self._capture)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hook is not None:
            self.hook.remove()

    def _capture(self, module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        self.seen = args[0]

    def record(self, live: torch.Tensor, column: int) -> None:
        if self.rows is not None:
            self.rows[live.cpu(), column : column + self.seen.shape[1]] = self.seen.to("cpu", torch.float16)

    def row(self, i: int, first: int, end: int) -> torch.Tensor | None:
        return None if self.rows is None else self.rows[i, first:end].clone()


def _warpers(sampling: Sampling) -> LogitsProcessorList | None:
    """transformers' warpers for the temperature (None: greedy). top_p=1 skips the vocabulary sort:
    the full distribution at that temperature, as served."""
    if not sampling.temperature:
        return None
    warpers = [TemperatureLogitsWarper(sampling.temperature)]
    if sampling.top_p < 1:
        warpers.append(NucleusWarper(sampling.top_p))
    return LogitsProcessorList(warpers)


class NucleusWarper(TopPLogitsWarper):
    """transformers' top-p cut, found among each row's NUCLEUS_CANDIDATES likeliest tokens where they hold it.

    TopPLogitsWarper sorts the whole vocabulary of every row: 30% of an article batch's step (96 rows
    of 49,152 tokens, 2 AVX2 cores, py-spy). A nucleus of 0.95 lies within a row's top few hundred
    tokens at the temperatures used here, and torch.topk finds those without the sort. A token is kept
    when the tokens likelier than it hold less than top_p (the library's rule: removed when it and the
    less likely ones hold at most 1 - top_p); rows whose nucleus reaches past the candidates go to the
    library's own cut."""

    def __call__(self, input_ids: torch.LongTensor | None, scores: torch.Tensor) -> torch.Tensor:
        candidates = scores.topk(min(NUCLEUS_CANDIDATES, scores.shape[-1]), dim=-1)  # sorted, likeliest first
        probs = (candidates.values - scores.logsumexp(dim=-1, keepdim=True)).exp()
        likelier = probs.cumsum(dim=-1) - probs  # the mass of the tokens likelier than each
        kept = likelier < self.top_p
        kept[:, : self.min_tokens_to_keep] = True
        out = torch.full_like(scores, self.filter_value).scatter(
            1, candidates.indices, candidates.values.masked_fill(~kept, self.filter_value)
        )
        beyond = kept[:, -1]  # the last candidate is kept: the nucleus may reach past the candidates
        if beyond.any():
            out[beyond] = super().__call__(input_ids, scores[beyond])
        return out


NUCLEUS_CANDIDATES = 1024


def _pick(logits: torch.Tensor, warpers: LogitsProcessorList | None) -> torch.Tensor:
    if warpers is None:
        return logits.argmax(dim=-1)
    return sample(torch.softmax(warpers(None, logits), dim=-1))  # the warpers take the ids so far and ignore them


SAMPLE_BLOCK = 256  # tokens per block of sample()'s first draw


def sample(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of probs [rows, vocabulary]: a block of SAMPLE_BLOCK tokens with the block's share
    of the row, then a token of that block with its share of the block, so token i with probability
    probs[i]. By hand because torch.multinomial, which transformers' generate calls, took 93 ms per step
    for 96 rows of 49,152 tokens on 2 CPU cores, a third of the step; this takes a few ms. Two draws, not
    one cumulative sum over the whole row: in float32 that sum rounds away every token below ~3e-8 (some
    20k of 49,152), and in float64 it costs 4-10x as much."""
    rows, vocabulary = probs.shape
    padded = probs if vocabulary % SAMPLE_BLOCK == 0 else F.pad(probs, (0, -vocabulary % SAMPLE_BLOCK))
    blocks = padded.view(rows, -1, SAMPLE_BLOCK)
    block = _invert(blocks.sum(dim=-1))
    return block * SAMPLE_BLOCK + _invert(blocks[torch.arange(rows, device=probs.device), block])


def _invert(weights: torch.Tensor) -> torch.Tensor:
    """One index per row of weights [rows, n] >= 0, with probability proportional to its weight: the
    row's cumulative sum inverted at a uniform draw, index i when cdf[i-1] <= u < cdf[i]."""
    cdf = weights.double().cumsum(dim=-1)
    u = torch.rand(weights.shape[0], 1, device=weights.device, dtype=torch.float64) * cdf[:, -1:]
    picked = torch.searchsorted(cdf, u, right=True).squeeze(1)  # right=True skips zero weights
    # u may round up to the total: the row's last index with any weight, not a zero one after it
    last = weights.shape[-1] - 1 - (weights.flip(-1) > 0).int().argmax(dim=-1)
    return torch.minimum(picked, last)


# A row loops once its last LOOP_WINDOW generated tokens have appeared LOOP_REPEATS times in it: a
# sampled small model that loops on long text never leaves the loop (the corpus's articles at
# temperature 0.8: 196 of 288 ran to 1,500 tokens, every one of them looping, most from a few hundred
# tokens on). 16 tokens ~ 12 words: stricter than the quality filter's 8-word test, which cuts the rest.
LOOP_WINDOW, LOOP_REPEATS = 16, 3


def _looping(generated: torch.Tensor) -> torch.Tensor:
    """[rows] bool: which rows of generated [rows, length] loop."""
    if generated.shape[1] < LOOP_WINDOW * LOOP_REPEATS:
        return torch.zeros(generated.shape[0], dtype=torch.bool, device=generated.device)
    windows = generated.unfold(1, LOOP_WINDOW, 1)  # [rows, positions, LOOP_WINDOW], a view
    return (windows == windows[:, -1:]).all(dim=-1).sum(dim=1) >= LOOP_REPEATS


def free_cores() -> int:
    """CPU cores not busy with other processes (measurements.other_cores_busy), at least one: decoding
    with more threads than free cores makes every OpenMP barrier wait for a descheduled thread.
    Measured on 2 shared cores (load about 3): 1 thread 110 response tokens/s, 2 threads 22."""
    return max(1, (os.cpu_count() or 1) - round(other_cores_busy()))
