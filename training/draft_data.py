"""Training data for the EAGLE draft head: the target's own answers and its hidden states.

Self-distillation: the head must predict what *this* target says, so the data is the target's
responses (greedy and sampled) to prompts built from the task and topic lists in
assets/draft_tasks.json, plus the target's last hidden state at every position. The split is
by filler (topic, sentence or code snippet): every HELD_OUT_EVERY-th filler is held out, so the
held-out prompts are about things the head never saw in training.

Generation is batched through transformers' `generate` (our engine decodes one sequence at a
time). Each batch is saved as one shard as soon as it is done, so a stopped run resumes where it
stopped and a rerun reuses what is on disk.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specdec_core.lean_pass import hidden_state_indices
from specdec_core.prompts import encode_prompt, stop_token_ids

TASKS = Path(__file__).resolve().parent.parent / "assets" / "draft_tasks.json"
HELD_OUT_EVERY = 7
# Sampling temperatures of the responses, cycled over prompts: greedy answers are what the
# structured workloads serve, sampled ones what creative text at T = 0.7-1 looks like.
TEMPERATURES = (0.0, 0.0, 0.7, 1.0)


@dataclass(frozen=True, slots=True)
class TrainingPrompt:
    kind: str  # "structured", "creative" or "general"
    text: str
    temperature: float


def build_prompts(split: str, tasks_path: Path = TASKS) -> list[TrainingPrompt]:
    """Every prompt of one split ("train" or "heldout"), in a fixed order."""
    tasks = json.loads(tasks_path.read_text())
    prompts: list[TrainingPrompt] = []
    for kind in ("structured", "creative", "general"):
        for template in tasks[kind]:
            for text, filler_index in _fill(template, tasks):
                held_out = filler_index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
                if held_out == (split == "heldout"):
                    prompts.append(TrainingPrompt(kind, text, 0.0))
    # Temperatures are assigned after the split so both splits mix greedy and sampled answers alike.
    return [TrainingPrompt(p.kind, p.text, TEMPERATURES[i % len(TEMPERATURES)]) for i, p in enumerate(prompts)]


def _fill(template: str, tasks: dict) -> list[tuple[str, int]]:
    """(prompt text, index of the filler that decides the split) for each filler of a template."""
    if "{code}" in template:
        return [
            (template.format(code=code, old=old, new=new), i)
            for i, (code, (old, new)) in enumerate(zip(tasks["code"], tasks["renames"]))
        ]
    if "{sentence}" in template:
        return [(template.format(sentence=s), i) for i, s in enumerate(tasks["sentences"])]
    return [(template.format(topic=t, n=3 + i % 5), i) for i, t in enumerate(tasks["topics"])]


def sample_prompts(split: str, count: int, seed: int = 0) -> list[TrainingPrompt]:
    """A seeded sample of one split (all of it when count exceeds its size)."""
    prompts = build_prompts(split)
    random.Random(seed).shuffle(prompts)
    return prompts[:count]


@dataclass(frozen=True, slots=True)
class TrainingSequence:
    """One conversation as the head trains on it: its tokens, where the answer starts, the target's features."""

    tokens: torch.Tensor  # [T] int64: prompt (chat template) + response, cut after the first stop token
    prompt_length: int
    # [T, F] float16: what the head reads, the target's last hidden state (before the final norm) unless the
    # next field is set; None for token ids whose features are made when a batch is trained (the corpus)
    features: torch.Tensor | None
    last_layer: torch.Tensor | None = (
        None  # [T, H] float16: that last hidden state, when the features are other layers'
    )

    @property
    def response_length(self) -> int:
        return len(self.tokens) - self.prompt_length

    @property
    def targets(self) -> torch.Tensor:
        """The target's last hidden states [T, H]: its next-token distribution, and EAGLE-1's regression target."""
        return self.features if self.last_layer is None else self.last_layer


def generate_shards(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[TrainingPrompt],
    folder: Path,
    max_new_tokens: int = 128,
    batch_size: int = 32,
    seed: int = 0,
) -> list[Path]:
    """Generates and saves one shard per batch; shards already on disk are kept, not redone."""
    folder.mkdir(parents=True, exist_ok=True)
    stops = sorted(stop_token_ids(tokenizer, model))
    # Batches share one temperature; prompts of similar length pad less.
    ordered = sorted(prompts, key=lambda p: (p.temperature, len(p.text)))
    batches = [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]
    paths = []
    progress = tqdm(batches, desc=f"generating {folder.name}", unit="batch")
    for index, batch in enumerate(progress):
        path = folder / f"shard-{index:04d}.pt"
        paths.append(path)
        if path.is_file():
            continue
        torch.manual_seed(seed * 100_003 + index)
        encoded = [encode_prompt(tokenizer, p.text) for p in batch]
        sequences = generate_batch(model, encoded, batch[0].temperature, stops, max_new_tokens)
        torch.save(
            [{"tokens": s.tokens, "prompt_length": s.prompt_length, "features": s.features} for s in sequences],
            path.with_suffix(".tmp"),
        )
        path.with_suffix(".tmp").rename(path)  # a half-written shard is never taken for a done one
        progress.set_postfix(tokens=sum(s.response_length for s in sequences))
    return paths


@torch.inference_mode()
def generate_batch(
    model: PreTrainedModel, encoded: list[list[int]], temperature: float, stops: list[int], max_new_tokens: int
) -> list[TrainingSequence]:
    """The target's responses to a batch of encoded prompts (greedy at temperature 0), with their features."""
    pad = stops[0]
    width = max(len(ids) for ids in encoded)
    # Left padding, so that every response starts at the same column.
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(ids) for ids in encoded])[:, None]).long()
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature
        else {"do_sample": False}
    )
    out = model.generate(
        input_ids=input_ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=max_new_tokens,
        eos_token_id=stops,
        pad_token_id=pad,
        **sampling,
    )
    sequences = []
    for row, ids in enumerate(encoded):
        response = out[row, width:].tolist()
        for i, token in enumerate(response):
            if token in stops:
                response = response[: i + 1]
                break
        sequences.append(torch.tensor(ids + response))
    features = hidden_states(model, sequences)
    return [TrainingSequence(s, len(ids), f) for s, ids, f in zip(sequences, encoded, features)]


def length_batches(sequences: list[TrainingSequence], batch_tokens: int) -> list[list[int]]:
    """Indices of the sequences, shortest first, in batches of similar length whose padded size stays
    within batch_tokens (a longer sequence alone makes a batch of its own)."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(sequences)), key=lambda i: len(sequences[i].tokens)):
        if current and (len(current) + 1) * len(sequences[i].tokens) > batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current] if current else batches


def hidden_states(
    model: PreTrainedModel,
    sequences: list[torch.Tensor],
    layers: tuple[int, ...] = (-1,),
    dtype: torch.dtype = torch.float32,
) -> list[torch.Tensor]:
    """The outputs of the numbered layers (from 0, ascending and distinct; -1 the last, before the final
    norm), side by side, per sequence: [T, len(layers) * H] float16 on the CPU. dtype: the forward's precision
    (bfloat16 runs it under autocast, as training does where the CPU has bfloat16)."""
    width = max(len(s) for s in sequences)
    input_ids = torch.stack([torch.nn.functional.pad(s, (0, width - len(s))) for s in sequences]).to(model.device)
    lengths = torch.tensor([len(s) for s in sequences], device=input_ids.device)
    mask = (torch.arange(width, device=input_ids.device)[None, :] < lengths[:, None]).long()
    selected = hidden_state_indices(model, layers)
    with torch.autocast(model.device.type, dtype=dtype, enabled=dtype != torch.float32):
        out = model.model(input_ids=input_ids, attention_mask=mask, output_hidden_states=selected)
    hidden = torch.cat(
        [out.hidden_states[i].to(torch.float16) for i in selected], dim=-1
    )  # [B, width, F]; right padding: real positions first
    return [hidden[row, : len(s)].to("cpu", copy=True) for row, s in enumerate(sequences)]


def load_sequences(paths: list[Path]) -> list[TrainingSequence]:
    sequences = []
    for path in paths:
        for item in torch.load(path, weights_only=True):
            sequences.append(TrainingSequence(item["tokens"], int(item["prompt_length"]), item["features"]))
    return sequences
