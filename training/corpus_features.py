"""The target's features for corpus records, recomputed from their token ids by one teacher-forced
pass: the shards keep ids only (small enough to commit), the features (about 1 KB a token in
float16 for SmolLM2-135M) are made where the head is trained."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers import PreTrainedModel

from training.draft_data import Sequence, last_hidden_states
from training.shards import Record


@torch.inference_mode()
def sequences(model: PreTrainedModel, records: list[Record], batch_tokens: int = 16_384) -> Iterator[Sequence]:
    """draft_data Sequences (tokens, prompt length, features), a length-sorted batch at a time, so
    that a corpus larger than memory can be streamed."""
    ordered = sorted(records, key=lambda r: len(r.prompt) + len(r.response))
    batch: list[Record] = []
    for record in ordered:
        if batch and (len(batch) + 1) * (len(record.prompt) + len(record.response)) > batch_tokens:
            yield from _featurize(model, batch)
            batch = []
        batch.append(record)
    if batch:
        yield from _featurize(model, batch)


def _featurize(model: PreTrainedModel, batch: list[Record]) -> list[Sequence]:
    tokens = [torch.tensor(r.prompt + r.response, device=model.device) for r in batch]
    features = last_hidden_states(model, tokens)
    return [Sequence(t.cpu(), len(r.prompt), f.cpu()) for t, r, f in zip(tokens, batch, features)]
