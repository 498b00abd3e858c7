"""Which records of a corpus (training/corpus.py) the head trains on, and which it holds out: the
target's answers, split by conversation."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from training.corpus_features import ids_only, with_layers
from training.shards import Record, read_features, read_shard, token_key, write_features

# The jobs whose records are the target's answers to a prompt, as served: the training data. Answers the
# corpus's filters would drop (empty, looping) stay, as in the responses: they are the target's own behaviour.
RESPONSES, FIRST_ANSWERS = "responses", "first-answers"
ANSWER_JOBS = (RESPONSES, FIRST_ANSWERS)
HELDOUT_EVERY = 50  # about one conversation in 50 is held out (the learning curve's)


@dataclass(frozen=True, slots=True)
class Answer:
    record: Record
    heldout: bool


def answers(folder: Path) -> list[Answer]:
    """Every answer written so far: the responses, and the first answers of the two-turn chats (whose
    second answers are among the responses). The jobs are interleaved by each shard's place in its
    job's plan (already shuffled), so a run capped at its first N tokens samples both, and a shard
    written later does not move the ones before it. A record is held out by a stable hash of its
    conversation: a two-turn chat's first answer and its second (whose prompt begins with the first
    answer's prompt, and whose follow-up often asks to restate it) fall on the same side."""
    jobs = [_job_records(folder / name) for name in ANSWER_JOBS]
    placed = sorted(
        (((place, n, i), record) for n, job in enumerate(jobs) for place, i, record in job), key=lambda pair: pair[0]
    )
    records = [record for _, record in placed]
    firsts = {tuple(r.prompt) for _, _, r in jobs[1]}
    lengths = sorted({len(p) for p in firsts})
    return [
        Answer(r, zlib.crc32(repr(_conversation(r.prompt, firsts, lengths)).encode()) % HELDOUT_EVERY == 0)
        for r in records
    ]


def made_features(folder: Path) -> dict[bytes, np.ndarray]:
    """The features a float32 target kept for the answers as it wrote them (shards.features_path; present on the
    machine that wrote them), by shards.token_key of the answer's prompt and response: rows a float32 feature
    store copies instead of recomputing."""
    made = {}
    for _, records, rows in _answer_shards(folder):
        start = 0
        for record in records if rows is not None else ():
            tokens = record.prompt + record.response
            made[token_key(tokens)] = rows[start : start + len(tokens)]
            start += len(tokens)
    return made


def keep_missing_features(folder: Path, model: PreTrainedModel) -> int:
    """Makes the features file (shards.write_features) of every answer shard that has none: shards written
    before the generation kept features, or on another machine. One teacher-forced float32 forward over the
    shard (corpus_features.with_layers), the rows generation keeps, so a feature store copies them from then on
    instead of remaking them whenever the corpus grows (its store is named by the whole data). Returns how many
    shards it wrote."""
    if model.dtype != torch.float32:
        raise ValueError(f"kept features are a float32 forward's; this target is {model.dtype}")
    missing = [(shard, records) for shard, records, rows in _answer_shards(folder) if rows is None]
    for shard, records in tqdm(missing, desc="features kept for earlier shards", unit="shard"):
        made = with_layers(model, ids_only(records), ())
        write_features(shard, records, torch.cat([s.features for s in made]).to(torch.float16))
    return len(missing)


def _answer_shards(folder: Path) -> Iterator[tuple[Path, list[Record], np.ndarray | None]]:
    """Each answer shard, its records, and the features kept for them (None where none were)."""
    for name in ANSWER_JOBS:
        for shard in sorted((folder / name).glob("shard-*.npz")):
            records = read_shard(shard)
            yield shard, records, read_features(shard, records)


def _job_records(folder: Path) -> list[tuple[float, int, Record]]:
    """(the shard's place in the job's plan, from 0 to 1; the record's place in its shard; the record)."""
    if not (folder / "job.json").is_file():
        return []
    planned = len(json.loads((folder / "job.json").read_text())["batches"])
    return [
        (int(shard.stem.split("-")[1]) / planned, i, record)
        for shard in sorted(folder.glob("shard-*.npz"))
        for i, record in enumerate(read_shard(shard))
    ]


def _conversation(prompt: list[int], firsts: set[tuple[int, ...]], lengths: list[int]) -> tuple[int, ...]:
    """The first-turn prompt this prompt begins with (its chat's), else the prompt itself."""
    for length in lengths:
        if length > len(prompt):
            break
        if tuple(prompt[:length]) in firsts:
            return tuple(prompt[:length])
    return tuple(prompt)
