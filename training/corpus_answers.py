"""Which records of a corpus (training/corpus.py) the head trains on: the target's answers."""

from __future__ import annotations

from pathlib import Path

from training.shards import Record, read_job

# The jobs whose records are the target's answers to a prompt, as served: the training data.
ANSWER_JOBS = ("responses", "first-answers")


def answer_records(folder: Path) -> list[Record]:
    """Every answer of the corpus: the responses, and the first answers of the two-turn chats (whose
    second answers are among the responses). The jobs are interleaved by their place in their own plan,
    each already shuffled, so a run capped at its first N tokens samples both. Indices stay per job."""
    jobs = [read_job(folder / name) for name in ANSWER_JOBS]
    placed = [(i / len(job), n, i) for n, job in enumerate(jobs) for i in range(len(job))]
    return [jobs[n][i] for _, n, i in sorted(placed)]
