"""The evaluation prompt sets shipped in assets/eval/ (see its NOTICE.md), for the bench and the
workload check. Evaluation only: training/ checks that none of its prompts overlap them.

- spec_bench: first turns of a subset of Spec-Bench (Xia et al. 2024, Apache-2.0), by task:
  mt_bench (multi-turn chat, writing, coding...), translation, summarization, qa, math_reasoning, rag.
- realistic: 112 prompts in 14 categories, phrased the way people type to a chatbot, written for
  this project before any head was trained on new data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

EVAL_DIR = Path(__file__).resolve().parent.parent / "assets" / "eval"
SETS = {"spec_bench": ("spec_bench.jsonl", "task"), "realistic": ("realistic_heldout.jsonl", "category")}


@dataclass(frozen=True, slots=True)
class EvalPrompt:
    suite: str  # "spec_bench" or "realistic"
    category: str  # Spec-Bench's task, or the realistic set's category
    id: str
    text: str


@cache
def eval_prompts(suite: str) -> tuple[EvalPrompt, ...]:
    """Every prompt of one suite, in file order."""
    file, field = SETS[suite]
    rows = [json.loads(line) for line in (EVAL_DIR / file).read_text(encoding="utf-8").splitlines() if line.strip()]
    return tuple(EvalPrompt(suite, row[field], str(row["id"]), row["text"]) for row in rows)


def by_category(suite: str, per_category: int) -> dict[str, list[EvalPrompt]]:
    """The first `per_category` prompts of each category, categories in file order."""
    groups: dict[str, list[EvalPrompt]] = {}
    for prompt in eval_prompts(suite):
        groups.setdefault(prompt.category, [])
        if len(groups[prompt.category]) < per_category:
            groups[prompt.category].append(prompt)
    return groups
