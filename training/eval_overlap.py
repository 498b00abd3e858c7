"""Keeps evaluation prompts out of training: every prompt the head or the app is measured on, and
the filter that drops a training text overlapping one of them (a test checks the corpus).

For the evaluation files and the app's workloads, a text overlaps a prompt when, after
normalisation (training.text_ngrams), it is the same text, or they share at least a fifth of the
shorter one's word 5-grams (one is enough for a short prompt: copied, or wrapped in a template),
or their word 3-gram Jaccard is 0.5 or more (a light paraphrase).

draft_data's held-out split is its templates filled with held-out topics, sentences and code
(every HELD_OUT_EVERY-th filler): the head is measured there on things it never saw, in templates
it did see. n-gram rules would flag every prompt that shares a generic template phrase ("Give me
some tips about"), including draft_data's own training split. So against that split a text
overlaps when it is one of its prompts or mentions one of its held-out fillers.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from training.draft_data import HELD_OUT_EVERY, TASKS, build_prompts
from training.text_ngrams import ngrams, normalised, words

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DRAFT_HELDOUT = "draft_heldout"


def evaluation_prompts(assets: Path = ASSETS) -> dict[str, list[str]]:
    """Every evaluation prompt set by name: the two eval files, the app's workloads and draft_data's held-out split."""
    workloads = json.loads((assets / "workloads.json").read_text())
    return {
        "spec_bench": _jsonl_texts(assets / "eval" / "spec_bench.jsonl"),
        "realistic_heldout": _jsonl_texts(assets / "eval" / "realistic_heldout.jsonl"),
        "workloads": [p["text"] for s in workloads.values() for p in s["prompts"]],
        DRAFT_HELDOUT: [p.text for p in build_prompts("heldout")],
    }


def _jsonl_texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True, slots=True)
class OverlapRule:
    n: int = 5
    share: float = 0.2  # of the shorter text's n-grams
    jaccard_n: int = 3
    jaccard: float = 0.5


class _GramIndex:
    """Evaluation prompts by word n-gram: counts the n-grams a text shares with each of them."""

    def __init__(self, texts: list[list[str]], n: int) -> None:
        self.n = n
        self.sizes = [len(set(ngrams(t, n))) for t in texts]
        self.postings: dict[tuple[str, ...], list[int]] = {}
        for index, tokens in enumerate(texts):
            for gram in set(ngrams(tokens, n)):
                self.postings.setdefault(gram, []).append(index)

    def shared(self, tokens: list[str]) -> tuple[int, Counter]:
        grams = set(ngrams(tokens, self.n))
        return len(grams), Counter(i for g in grams for i in self.postings.get(g, ()))


class EvalSet:
    """One named evaluation set, ready to test texts against."""

    def __init__(self, texts: list[str], rule: OverlapRule) -> None:
        self.rule = rule
        self.exact = {normalised(t) for t in texts}
        tokenized = [words(t) for t in texts]
        self.contained = _GramIndex(tokenized, rule.n)
        self.similar = _GramIndex(tokenized, rule.jaccard_n)

    def overlaps(self, text: str) -> bool:
        if normalised(text) in self.exact:
            return True
        tokens = words(text)
        size, shared = self.contained.shared(tokens)
        for index, count in shared.items():
            if count >= max(1, math.ceil(self.rule.share * min(size, self.contained.sizes[index]))):
                return True
        size, shared = self.similar.shared(tokens)
        return any(count >= self.rule.jaccard * (size + self.similar.sizes[i] - count) for i, count in shared.items())


class HeldOutFillers:
    """draft_data's held-out split: its prompts, and the fillers that make them held out."""

    def __init__(self, prompts: list[str], tasks_path: Path = TASKS) -> None:
        tasks = json.loads(tasks_path.read_text())
        fillers = [
            f
            for name in ("topics", "sentences", "code")
            for i, f in enumerate(tasks[name])
            if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
        ]
        self.exact = {normalised(p) for p in prompts}
        self.phrases = [f" {normalised(f)} " for f in fillers]

    def overlaps(self, text: str) -> bool:
        padded = f" {normalised(text)} "
        return padded.strip() in self.exact or any(phrase in padded for phrase in self.phrases)


class OverlapFilter:
    """Which evaluation set, if any, a training text overlaps."""

    def __init__(self, sets: dict[str, list[str]] | None = None, rule: OverlapRule = OverlapRule()) -> None:
        sets = sets if sets is not None else evaluation_prompts()
        self.sets = {
            name: HeldOutFillers(texts) if name == DRAFT_HELDOUT else EvalSet(texts, rule)
            for name, texts in sets.items()
        }

    def overlap(self, text: str) -> str | None:
        """The name of the first evaluation set the text overlaps, or None."""
        return next((name for name, eval_set in self.sets.items() if eval_set.overlaps(text)), None)
