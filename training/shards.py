"""Resumable generation jobs: a list of prompts, batched, one shard file per batch.

A shard holds token ids only (prompt and response per record, with its family and temperature),
compressed uint16 when the vocabulary fits (2 bytes a token before compression), so a corpus of
millions of tokens is a few MB that can be committed and copied between machines; the target's
features are recomputed from the ids later by one teacher-forced pass. A shard is written to a
temporary file and renamed (atomic): a file named shard-*.npz is always complete, so a stopped
job resumes at the first missing shard and never redoes one. The batch plan is made once and
kept in the folder (job.json, with a fingerprint of the requests and settings), and each batch
draws from its own seed, so an interrupted and resumed job writes exactly the shards an
uninterrupted one would, on any machine (a GPU's numbers differ in the last bits, so its samples
may differ from a CPU's; shards already written stay).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from training.generation import Sampling, generate

# Token budget of a batch, in units of batch_size rows of this prompt length: long prompts
# (passages) come in fewer rows, so a batch costs about the same whatever it holds.
REFERENCE_PROMPT_TOKENS = 128


@dataclass(frozen=True, slots=True)
class Request:
    prompt: tuple[int, ...]
    family: str
    temperature: float


@dataclass(frozen=True, slots=True)
class Record:
    index: int  # the request's position in its job
    prompt: list[int]
    response: list[int]
    finished: bool
    family: str
    temperature: float


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    folder: Path
    top_p: float
    max_new_tokens: int
    batch_size: int
    quorum: float = 1.0  # generation.Sampling.quorum
    seed: int = 0
    target_tokens: int | None = None  # stop once the shards hold this many response tokens
    # generation.Sampling.stop_loops. Not in the fingerprint: it cuts looping rows short and, through the
    # quorum, may end a batch sooner; the stages that use it drop or trim unfinished and looping texts
    # anyway, so shards written with or without it mix.
    stop_loops: bool = False
    # Keep the target's features as the decoding makes them, beside each shard (features_path): the answer
    # jobs, whose records the head trains on, written by a float32 target. Not in the fingerprint: the shards
    # are the same either way.
    keep_features: bool = False


class Stopped(Exception):
    """The run's shard budget is spent; running the same command again goes on."""


@dataclass(slots=True)
class ShardBudget:
    """How many shards this run may still write (None: no limit), across all jobs."""

    left: int | None = None
    written: int = field(default=0)

    def spend(self) -> None:
        if self.left is not None and self.written >= self.left:
            raise Stopped(f"stopped after writing {self.written} shards")
        self.written += 1


def plan(requests: list[Request], batch_size: int, max_new_tokens: int, seed: int) -> list[list[int]]:
    """Batches of request indices: one temperature each, similar prompt lengths (little padding),
    in a seeded random order, so a job stopped at a token target has sampled every kind of prompt."""
    budget = batch_size * (REFERENCE_PROMPT_TOKENS + max_new_tokens)
    ordered = sorted(range(len(requests)), key=lambda i: (requests[i].temperature, len(requests[i].prompt), i))
    batches: list[list[int]] = []
    for i in ordered:
        current = batches[-1] if batches else None
        fits = current and requests[current[0]].temperature == requests[i].temperature and len(current) < batch_size
        if fits and (len(current) + 1) * (len(requests[i].prompt) + max_new_tokens) <= budget:
            current.append(i)
        else:
            batches.append([i])
    random.Random(seed).shuffle(batches)
    return batches


def run(
    model: PreTrainedModel, requests: list[Request], job: Job, stops: list[int], budget: ShardBudget
) -> list[Record]:
    """Every record of the job (all requests, or up to the token target), generating missing shards."""
    batches = _claim(job, requests)
    records: list[Record] = []
    progress = Progress(job, len(batches))
    for number, batch in enumerate(batches):
        if job.target_tokens is not None and progress.tokens >= job.target_tokens:
            break
        path = job.folder / f"shard-{number:05d}.npz"
        if path.is_file():
            shard = read_shard(path)
        else:
            budget.spend()
            torch.manual_seed(job.seed * 1_000_003 + zlib.crc32(job.name.encode()) + number)
            sampling = Sampling(
                requests[batch[0]].temperature, job.top_p, job.max_new_tokens, job.quorum, job.stop_loops
            )
            continuations = generate(
                model, [list(requests[i].prompt) for i in batch], sampling, stops, job.keep_features
            )
            shard = [
                Record(i, list(requests[i].prompt), c.ids, c.finished, requests[i].family, requests[i].temperature)
                for i, c in zip(batch, continuations)
            ]
            if job.keep_features:  # first, so that a shard on disk has its features whenever its job kept them
                write_features(path, shard, torch.cat([c.features for c in continuations]))
            write_shard(path, shard)
            progress.generated(sum(len(r.response) for r in shard))
        records.extend(shard)
        progress.shard_done(number, sum(len(r.response) for r in shard))
    return sorted(records, key=lambda r: r.index)


def _claim(job: Job, requests: list[Request]) -> list[list[int]]:
    """The job's batch plan: the one its folder records (so a resumed job keeps its shards whatever
    the batch size now), or a new one. A folder holding another job's shards is refused."""
    digest = hashlib.sha256(json.dumps([job.name, job.top_p, job.max_new_tokens, job.quorum, job.seed]).encode())
    for r in requests:
        digest.update(json.dumps([r.prompt, r.family, r.temperature]).encode())
    manifest = job.folder / "job.json"
    if manifest.is_file():
        saved = json.loads(manifest.read_text())
        if saved["fingerprint"] != digest.hexdigest():
            raise RuntimeError(
                f"{job.folder} holds shards of other prompts or settings for '{job.name}'; "
                "use another --out or delete it"
            )
        return saved["batches"]
    batches = plan(requests, job.batch_size, job.max_new_tokens, job.seed)
    job.folder.mkdir(parents=True, exist_ok=True)
    temporary = manifest.with_name("job.json.tmp")
    temporary.write_text(json.dumps({"job": job.name, "fingerprint": digest.hexdigest(), "batches": batches}) + "\n")
    os.replace(temporary, manifest)
    return batches


def write_shard(path: Path, records: list[Record]) -> None:
    tokens = [t for r in records for t in r.prompt + r.response]
    arrays = {
        "index": np.array([r.index for r in records], dtype=np.int32),
        "prompt_length": np.array([len(r.prompt) for r in records], dtype=np.int32),
        "response_length": np.array([len(r.response) for r in records], dtype=np.int32),
        "finished": np.array([r.finished for r in records], dtype=bool),
        "family": np.array([r.family for r in records], dtype=str),
        "temperature": np.array([r.temperature for r in records], dtype=np.float64),
        "tokens": np.array(tokens, dtype=np.uint16 if max(tokens, default=0) < 2**16 else np.int32),
    }
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        np.savez_compressed(f, **arrays)
    os.replace(temporary, path)


def token_key(tokens: torch.Tensor | list[int]) -> bytes:
    """Token ids as bytes: the key of a sequence's kept features, and what names a shard's features file."""
    return np.asarray(tokens, dtype=np.int64).tobytes()


def features_path(shard: Path, records: list[Record]) -> Path:
    """Where the features a float32 target made while generating a shard lie: beside it, git-ignored (float16,
    ~1.2 KB a token for SmolLM2-135M: they stay on the machine that wrote them), named by a checksum of the
    shard's token ids, so that a file never pairs with other tokens (a shard written again, or copied in)."""
    checksum = zlib.crc32(token_key([t for r in records for t in r.prompt + r.response]))
    return shard.with_name(f"{shard.stem}.features-{checksum:08x}.npy")


def write_features(shard: Path, records: list[Record], rows: torch.Tensor) -> None:
    """rows [tokens, hidden] float16, in the shard's token order (each record's prompt, then its response)."""
    path = features_path(shard, records)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        np.save(f, rows.numpy())
    os.replace(temporary, path)


def read_features(shard: Path, records: list[Record]) -> np.ndarray | None:
    """The features kept for the shard's records (a memory map), or None where none were kept for these tokens."""
    path = features_path(shard, records)
    return np.load(path, mmap_mode="r") if path.is_file() else None


def read_shard(path: Path) -> list[Record]:
    with np.load(path) as data:
        tokens = data["tokens"].astype(np.int64).tolist()
        records, start = [], 0
        for i, p, r, done, family, temperature in zip(
            data["index"],
            data["prompt_length"],
            data["response_length"],
            data["finished"],
            data["family"],
            data["temperature"],
        ):
            records.append(
                Record(
                    int(i),
                    tokens[start : start + p],
                    tokens[start + p : start + p + r],
                    bool(done),
                    str(family),
                    float(temperature),
                )
            )
            start += p + r
    return records


class Progress:
    """One line per shard: tokens so far, tokens/s of this run's generation, and the time left."""

    def __init__(self, job: Job, shards: int) -> None:
        self.job, self.shards = job, shards
        self.tokens = 0
        self.new_tokens = 0
        self.new_shards = 0
        self.started = time.perf_counter()

    def generated(self, tokens: int) -> None:
        self.new_tokens += tokens
        self.new_shards += 1

    def shard_done(self, number: int, tokens: int) -> None:
        self.tokens += tokens
        if not self.new_shards:
            return  # read from disk: nothing to report yet
        elapsed = time.perf_counter() - self.started
        rate = self.new_tokens / elapsed
        if self.job.target_tokens is not None:
            left = max(0, self.job.target_tokens - self.tokens) / max(rate, 1e-9)
            goal = f" / {self.job.target_tokens:,}"
        else:
            left = (self.shards - number - 1) * elapsed / self.new_shards
            goal = ""
        print(
            f"{self.job.name}: shard {number + 1}/{self.shards} | {self.tokens:,}{goal} tokens | "
            f"{rate:.0f} tokens/s | ETA {_clock(left)}",
            file=sys.stderr,
            flush=True,
        )


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def read_job(folder: Path) -> list[Record]:
    """Every record a job's folder holds, in shard order."""
    return [r for path in sorted(folder.glob("shard-*.npz")) for r in read_shard(path)]
