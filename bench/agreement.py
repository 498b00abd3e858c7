"""How often draft heads agree with the target on the evaluation sets, teacher-forced: per category, the
share of response positions where the head's s-th draft is the target's greedy token, given that the s - 1
before it were right (its greedy acceptance rate at each draft position, with no timing noise). The
prompts are the evaluation sets (assets/eval/, never trained on); the answers are the target's own, greedy,
generated once and cached. This is how heads trained on different data or feature layouts are compared.

    python -m bench --agreement assets/eagle-smollm2-135m,/tmp/heads/fused --per-category 8 --tokens 96 --head-k 3

With --save-beside each head's results are also written into its folder (agreement.json), where the app's
explainer reads them: the shipped head's numbers then change with the head, never by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import torch
from transformers import PreTrainedModel

from specdec_core import EMBEDDED_ID, load_model
from specdec_core.drafters.eagle_head import AGREEMENT_NAME, load_head
from specdec_core.eval_sets import by_category
from specdec_core.machine import this_machine
from specdec_core.prompts import encode_prompt, stop_token_ids
from specdec_core.sources import cache_dir
from training.corpus_features import with_layers
from training.draft_data import TrainingSequence, generate_batch
from training.train_head import Settings, heldout_agreement

SUITES = ("realistic", "spec_bench")
BATCH = 16  # answers generated at a time


def answers(
    model: PreTrainedModel, tokenizer, suite: str, per_category: int, tokens: int
) -> dict[str, list[TrainingSequence]]:
    """The target's greedy answers to a suite's prompts by category (token ids only), cached on disk for
    this target and this version of the prompt file."""
    prompts = by_category(suite, per_category)
    identity = json.dumps(
        [model.config._name_or_path, model.config.vocab_size, [p.text for rows in prompts.values() for p in rows]]
    )
    key = hashlib.sha256(identity.encode()).hexdigest()[:12]
    path = cache_dir() / "eval-answers" / f"{suite}-p{per_category}-t{tokens}-{key}.pt"
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        return {c: [TrainingSequence(t, n, None) for t, n in rows] for c, rows in saved.items()}
    stops = sorted(stop_token_ids(tokenizer, model))
    out: dict[str, list[TrainingSequence]] = {}
    for category, rows in prompts.items():
        encoded = [encode_prompt(tokenizer, p.text) for p in rows]
        out[category] = [
            TrainingSequence(s.tokens, s.prompt_length, None)
            for i in range(0, len(encoded), BATCH)
            for s in generate_batch(model, encoded[i : i + BATCH], 0.0, stops, tokens)
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({c: [(s.tokens, s.prompt_length) for s in rows] for c, rows in out.items()}, path)
    return out


def head_agreement(
    folder: Path, model: PreTrainedModel, data: dict[str, list[TrainingSequence]], depth: int
) -> dict[str, list[float]]:
    """Top-1 agreement by draft position, per category and over all ("all": every position counts once)."""
    head = load_head(folder, model)
    settings = Settings(depth=depth)
    featurized = {c: with_layers(model, rows, head.config.feature_layers) for c, rows in data.items()}
    result = {c: [round(a, 4) for a in heldout_agreement(head, rows, settings)] for c, rows in featurized.items()}
    result["all"] = [
        round(a, 4) for a in heldout_agreement(head, [s for rows in featurized.values() for s in rows], settings)
    ]
    return result


def agreement_report(args: argparse.Namespace) -> dict:
    loaded = load_model(EMBEDDED_ID, for_generate=True)  # transformers' layers: batched, padded passes
    heads = [Path(h) for h in args.agreement.split(",") if h]
    report: dict = {
        "when": datetime.now(UTC).isoformat(),
        "machine": this_machine().as_dict(),
        "tokens": args.tokens,
        "per_category": args.per_category,
        "depth": args.head_k,
        "suites": {},
    }
    for suite in SUITES:
        data = answers(loaded.model, loaded.tokenizer, suite, args.per_category, args.tokens)
        report["suites"][suite] = {str(h): head_agreement(h, loaded.model, data, args.head_k) for h in heads}
        print_suite(suite, report["suites"][suite])
    if args.save_beside:
        for head in heads:
            save_beside(head, report)
    return report


def save_beside(head: Path, report: dict) -> None:
    """This head's part of the report, into its folder."""
    card = {key: report[key] for key in ("when", "machine", "tokens", "per_category", "depth")}
    card["suites"] = {suite: by_head[str(head)] for suite, by_head in report["suites"].items()}
    (head / AGREEMENT_NAME).write_text(json.dumps(card, indent=1) + "\n")


def print_suite(suite: str, by_head: dict[str, dict[str, list[float]]]) -> None:
    print(f"\n{suite}: teacher-forced top-1 agreement by draft position")
    for head, rows in by_head.items():
        print(f"  {head}")
        for category, values in rows.items():
            print(f"    {category:<24} " + " ".join(f"{v:.3f}" for v in values))
