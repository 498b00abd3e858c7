"""The target's features for the corpus's training sequences, computed once and kept on disk.

Made on the fly, the features cost a target forward per training step: on the 2-core CPU about as much
as the head's own step, in every epoch of every run (the learning curve's data sizes, both feature
layouts). Kept here they are made once per layout: a float16 file of [tokens, width] rows, each
sequence's rows together, read into memory where they fit and through a memory map where they do not
(three layers and the last of 2M answer tokens and their prompts are about 15 GB: more than half of a
24 GB machine's memory; the last layer alone about 4 GB). The folder is named after a
digest of the target, the layers, the forward's precision and every token id, so a changed corpus, layout
or precision makes a new one; it is built in chunks of sequences and resumes after the last sequence of
the last finished chunk. Rows the generation already made (corpus_answers.made_features: the
last layer, kept as a float32 target decoded) are copied into a float32 store instead of recomputed; they
differ from a fresh forward's in the last bits only, and their last row, never read in training, is zero.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from specdec_core.sources import free_memory
from training.corpus_features import with_layers
from training.draft_data import TrainingSequence
from training.shards import token_key

CHUNK_TOKENS = 65_536  # sequences written (and resumed) together: about a minute of the target's time on 2 cores
ROWS = "features.f16"
STATE = "state.json"


def stored_features(
    model: PreTrainedModel,
    data: list[TrainingSequence],
    layers: tuple[int, ...],
    root: Path,
    dtype: torch.dtype = torch.float32,
    count: int | None = None,
    made: Mapping[bytes, np.ndarray] | None = None,
) -> list[TrainingSequence]:
    """The first `count` sequences (all when None) with the features of `layers` as with_layers makes them with
    a forward at `dtype`'s precision, read from the store under root; the missing part is made first, or copied
    from `made` (float32 rows of the last layer, by shards.token_key). The store is the whole data's, so a run
    capped at fewer sequences makes only their features, and a larger run goes on from there (the learning
    curve's runs, smallest first)."""
    if made and (layers or dtype != torch.float32):
        raise ValueError("features kept by the generation are a float32 forward's last layer; this store makes its own")
    count = len(data) if count is None else count
    if not 0 <= count <= len(data):
        raise ValueError(f"count {count} is not between 0 and the {len(data)} sequences")
    hidden = model.config.hidden_size
    width = hidden * (len(layers) + 1 if layers else 1)  # the layers side by side, then the last layer (targets)
    if not data:
        return []
    folder = root / _digest(model, data, layers, dtype)
    offsets = np.cumsum([0] + [len(s.tokens) for s in data])
    rows, fresh = _rows(folder, int(offsets[-1]), width)
    done = 0 if fresh else _done(folder)  # sequences
    with tqdm(total=count, initial=min(done, count), desc="target features to disk", unit="sequence") as progress:
        for first, last in _chunks(offsets[: count + 1], done):
            _fill(rows, offsets, model, data, range(first, last), layers, dtype, made or {})
            rows.flush()
            _write_state(folder, last)
            progress.update(last - first)
    rows = _resident(rows, int(offsets[count]))
    return [_view(s, rows[offsets[i] : offsets[i + 1]], hidden, bool(layers)) for i, s in enumerate(data[:count])]


def _fill(
    rows: np.memmap,
    offsets: np.ndarray,
    model: PreTrainedModel,
    data: list[TrainingSequence],
    chunk: range,
    layers: tuple[int, ...],
    dtype: torch.dtype,
    made: Mapping[bytes, np.ndarray],
) -> None:
    """The chunk's rows: copied where `made` has them, the others made by one with_layers call."""
    missing = []
    for i in chunk:
        kept = made.get(token_key(data[i].tokens))
        if kept is None:
            missing.append(i)
        else:
            rows[offsets[i] : offsets[i + 1]] = kept
    for i, sequence in zip(missing, with_layers(model, [data[i] for i in missing], layers, dtype=dtype)):
        stacked = sequence.features if not layers else torch.cat([sequence.features, sequence.last_layer], dim=-1)
        rows[offsets[i] : offsets[i + 1]] = stacked.to(torch.float16).numpy()


def _resident(rows: np.memmap, used: int) -> np.ndarray:
    """The first `used` rows, loaded into memory where they take less than half of what is free; else the map.
    A training step reads its batch's sequences from all over the file, and read from a disk those reads are
    the step's cost: on a GPU machine whose page cache had not kept the newly written store, 3-4 steps/s until
    the file was cached, 14 after."""
    size = used * rows.shape[1] * rows.itemsize
    return np.array(rows[:used]) if size < free_memory() // 2 else rows


def _view(sequence: TrainingSequence, rows: np.ndarray, hidden: int, fused: bool) -> TrainingSequence:
    """The sequence with features as a view of the rows (in memory, or read from the map when a batch uses them)."""
    stored = torch.from_numpy(rows)
    if not fused:
        return TrainingSequence(sequence.tokens, sequence.prompt_length, stored)
    return TrainingSequence(sequence.tokens, sequence.prompt_length, stored[:, :-hidden], stored[:, -hidden:])


def _digest(model: PreTrainedModel, data: list[TrainingSequence], layers: tuple[int, ...], dtype: torch.dtype) -> str:
    config = model.config  # (a forward may add attributes to the config: only what names the model counts)
    shape = [
        type(model).__name__,
        config.num_hidden_layers,
        config.hidden_size,
        config.vocab_size,
        list(layers),
        str(dtype),
    ]
    digest = hashlib.sha256(json.dumps(shape).encode())
    # A sample of the weights says which checkpoint. Linears packed for the CPU (specdec_core/cpu_kernels.py) leave
    # their weights on the meta device, so the sample is taken among the tensors still held.
    parameters = [p for p in model.parameters() if not p.is_meta]
    for parameter in (parameters[0], parameters[1], parameters[-1]):
        digest.update(parameter.detach().float().flatten()[:4096].cpu().numpy().tobytes())
    for s in data:
        digest.update(token_key(s.tokens) + int(s.prompt_length).to_bytes(4, "little"))
    return digest.hexdigest()[:20]


def _rows(folder: Path, count: int, width: int) -> tuple[np.memmap, bool]:
    """The store's rows, and whether the file was made anew (then no chunk of it is done)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ROWS
    fresh = not (path.is_file() and path.stat().st_size == count * width * 2)
    return np.memmap(path, dtype=np.float16, mode="w+" if fresh else "r+", shape=(count, width)), fresh


def _chunks(offsets: np.ndarray, first: int) -> list[tuple[int, int]]:
    """Consecutive runs of about CHUNK_TOKENS tokens of the sequences from `first` on: (first, end) indices."""
    chunks = []
    for i in range(first + 1, len(offsets)):
        if offsets[i] - offsets[first] >= CHUNK_TOKENS or i == len(offsets) - 1:
            chunks.append((first, i))
            first = i
    return chunks


def _done(folder: Path) -> int:
    path = folder / STATE
    return json.loads(path.read_text())["sequences_done"] if path.is_file() else 0


def _write_state(folder: Path, sequences_done: int) -> None:
    temporary = folder / (STATE + ".tmp")
    temporary.write_text(json.dumps({"sequences_done": sequences_done}) + "\n")
    os.replace(temporary, folder / STATE)
