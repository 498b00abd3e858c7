"""The built-in prompt sets (assets/workloads.json) and the user's own prompts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specdec_core import SpecDecError
from specdec_core.eval_sets import by_category

from .limits import MAX_WORKLOAD_PROMPTS

WORKLOADS_FILE = Path(__file__).resolve().parent.parent / "assets" / "workloads.json"
CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class WorkloadPrompt:
    workload: str
    name: str
    text: str
    temperature: float


EVAL_PER_SET = 3  # prompts per evaluation category in a check: three categories fit one check's limit


@cache
def builtin_sets() -> dict:
    """structured and creative (assets/workloads.json), then Spec-Bench's six tasks and the realistic
    held-out set's categories (assets/eval/, evaluation only), greedy, the first prompts of each."""
    sets = json.loads(WORKLOADS_FILE.read_text(encoding="utf-8"))
    for suite, label in (("spec_bench", "Spec-Bench"), ("realistic", "realistic")):
        for category, prompts in by_category(suite, EVAL_PER_SET).items():
            sets[f"{suite}:{category}"] = {
                "description": f"{label}: {category.replace('_', ' ')}",
                "temperature": 0.0,
                "prompts": [{"name": f"{category} {p.id}", "text": p.text} for p in prompts],
            }
    return sets


def set_choices() -> list[tuple[str, str]]:
    """(label, name) of every built-in set, for the checkbox group."""
    return [(s["description"] if ":" in name else name, name) for name, s in builtin_sets().items()]


def select_prompts(sets: list[str], own_prompts: str, own_temperature: float) -> list[WorkloadPrompt]:
    prompts = [
        WorkloadPrompt(name, p["name"], p["text"], builtin_sets()[name]["temperature"])
        for name in sets
        if name != CUSTOM
        for p in builtin_sets()[name]["prompts"]
    ]
    if CUSTOM in sets:
        lines = [line.strip() for line in (own_prompts or "").splitlines() if line.strip()]
        if not lines:
            raise SpecDecError("'your prompts' is selected but empty: write one prompt per line.")
        prompts += [
            WorkloadPrompt(CUSTOM, f"#{i + 1} {line[:24]}", line, own_temperature) for i, line in enumerate(lines)
        ]
    if not prompts:
        raise SpecDecError("Choose at least one prompt set.")
    if len(prompts) > MAX_WORKLOAD_PROMPTS:
        raise SpecDecError(f"{len(prompts)} prompts selected; the limit is {MAX_WORKLOAD_PROMPTS} per check.")
    return prompts


def race_presets() -> list[tuple[str, str]]:
    """(label, prompt text) pairs for the race tab's preset buttons."""
    return [
        (f"{name}: {p['name']}", p["text"])
        for name in ("structured", "creative")
        for p in builtin_sets()[name]["prompts"]
    ]
