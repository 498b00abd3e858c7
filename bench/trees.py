"""python -m bench --trees: how many tokens per target pass the head's trees could give, and what
this machine's verification cost curve makes of them (greedy, realistic held-out set).

Tokens per pass are exact (greedy decoding is deterministic); the speed is modelled, not timed:
tokens per pass over the mean cost of a step in target passes, T(N + 1)/T(1) from the curve
measured at load (read at each step's context length) plus the head's passes times its c. That
separates what a bigger tree buys from what it costs here, the trade tree.choose_size makes at each step.
"""

from __future__ import annotations

import statistics
from datetime import UTC, datetime

from specdec_core.config import DraftConfig, GenerationConfig
from specdec_core.drafters import DRAFT_EAGLE, DRAFT_EAGLE_TREE
from specdec_core.drafters.eagle import EagleDrafter, TreeShape
from specdec_core.drafters.head_variants import DRAFT_EAGLE_PREFIX, eagle_head
from specdec_core.engine import speculative
from specdec_core.eval_sets import by_category
from specdec_core.events import PlainStep, SpecStep
from specdec_core.machine import this_machine
from specdec_core.models import load_model
from specdec_core.prompts import encode_prompt, stop_token_ids
from specdec_core.sources import EMBEDDED_ID
from specdec_core.tuning import c_at_load, cost_curve

from .measure import curve_fields
from .suite import only_named

# name -> (tree shape or None for a chain, depth k, sized by the cost curve?)
SHAPES = {
    "chain k=3": (None, 3, False),
    "chain k=4": (None, 4, False),
    "tree 3x3, sized by the curve": (TreeShape(3, 16), 3, True),
    "tree 4x4, sized by the curve": (TreeShape(4, 16), 4, True),
    "tree 3x4, 16 nodes": (TreeShape(3, 16), 4, False),
    "tree 4x5, 24 nodes": (TreeShape(4, 24), 5, False),
}


def tree_report(args) -> dict:
    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    head = eagle_head(target.source, DRAFT_EAGLE.removeprefix(DRAFT_EAGLE_PREFIX))
    curve = cost_curve(target.model)
    # c of a chain's head pass and of a tree level's (several nodes a pass, and the tree's bookkeeping), as served
    chain_c, tree_c = (
        c_at_load(EMBEDDED_ID, target.model.dtype, spec) or 0.0 for spec in (DRAFT_EAGLE, DRAFT_EAGLE_TREE)
    )
    c = {name: chain_c if shape is None else tree_c for name, (shape, _, _) in SHAPES.items()}
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    categories = only_named(by_category("realistic", args.per_category), args.categories, "--categories", "category")
    for category, prompts in categories.items():
        steps: dict[str, list[tuple[SpecStep, int]]] = {
            name: [] for name in SHAPES
        }  # each step with its context length
        for item in prompts:
            prompt = encode_prompt(target.tokenizer, item.text)
            for name, (shape, k, sized) in SHAPES.items():
                drafter = EagleDrafter(head, name, shape, curve if sized else None, c[name])
                context = len(prompt)
                for event in speculative(
                    target.model, drafter, prompt, GenerationConfig(max_new_tokens=args.tokens), DraftConfig(k=k), stops
                ):
                    if isinstance(event, SpecStep):
                        steps[name].append((event, context))
                    if isinstance(event, (PlainStep, SpecStep)):
                        context += len(event.emitted_tokens)
        rows[category] = {name: _tokens_and_cost(s, curve, c[name]) for name, s in steps.items()}
        print(
            f"[{category}] " + ", ".join(f"{n} {t:.2f}/{t / cost:.2f}x" for n, (t, cost) in rows[category].items()),
            flush=True,
        )
    mean = {
        name: {
            "tokens_per_pass": statistics.mean(r[name][0] for r in rows.values()),
            "modelled_speedup": statistics.mean(r[name][0] / r[name][1] for r in rows.values()),
        }
        for name in SHAPES
    }
    print(mean)
    return {
        "when": datetime.now(UTC).isoformat(),
        "machine": this_machine().as_dict(),
        "args": vars(args),
        **curve_fields(curve),
        "c": c,
        "mean": mean,
        "categories": {
            cat: {n: {"tokens_per_pass": t, "step_cost": cost} for n, (t, cost) in r.items()} for cat, r in rows.items()
        },
    }


def _tokens_and_cost(steps: list[tuple[SpecStep, int]], curve, c: float) -> tuple[float, float]:
    """Mean tokens per pass, and mean step cost in target passes (verification from the curve at the step's
    context length, drafting at c)."""
    tokens = statistics.mean(s.accepted_count + 1 for s, _ in steps)
    costs = (curve.step_costs(context, c).step(s.drafted_count + 1, s.draft_passes) for s, context in steps)
    return tokens, statistics.mean(costs)
