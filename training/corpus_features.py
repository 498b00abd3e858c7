"""The target's features for training sequences, recomputed from their token ids by one teacher-forced
pass: the shards keep ids only (small enough to commit), the features (about 1 KB a token and layer in
float16 for SmolLM2-135M) are made where the head is trained."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from training.draft_data import TrainingSequence, hidden_states, length_batches
from training.shards import Record


def ids_only(records: list[Record]) -> list[TrainingSequence]:
    """Corpus records as Sequences of token ids, their features to be made by with_layers."""
    return [TrainingSequence(torch.tensor(r.prompt + r.response), len(r.prompt), None) for r in records]


@torch.inference_mode()
def with_layers(
    model: PreTrainedModel,
    data: list[TrainingSequence],
    layers: tuple[int, ...],
    batch_tokens: int = 16_384,
    dtype: torch.dtype = torch.float32,
) -> list[TrainingSequence]:
    """The same sequences, in the same order, with the features of the numbered layers (() for the last
    layer, EAGLE-1; otherwise the last layer's kept as their targets), made a batch of similar lengths at a
    time by a forward at `dtype`'s precision."""
    out: list[TrainingSequence | None] = [None] * len(data)
    for batch in length_batches(data, batch_tokens):
        for i, sequence in zip(
            batch, _featurize(model, [(data[i].tokens, data[i].prompt_length) for i in batch], layers, dtype)
        ):
            out[i] = sequence
    return out


def _featurize(
    model: PreTrainedModel, batch: list[tuple[torch.Tensor, int]], layers: tuple[int, ...], dtype: torch.dtype
) -> list[TrainingSequence]:
    count, size = model.config.num_hidden_layers, model.config.hidden_size
    read = sorted({i % count for i in (*layers, -1)})  # the last layer's output always: the targets
    hidden = hidden_states(model, [t.to(model.device) for t, _ in batch], tuple(read), dtype)

    def block(h: torch.Tensor, layer: int) -> torch.Tensor:
        at = read.index(layer % count) * size
        return h[:, at : at + size]

    out = []
    for (tokens, length), h in zip(batch, hidden):
        h = h.cpu()
        features = torch.cat([block(h, layer) for layer in layers], dim=-1) if layers else block(h, -1).clone()
        out.append(TrainingSequence(tokens.cpu(), length, features, block(h, -1).clone() if layers else None))
    return out
