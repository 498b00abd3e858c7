"""python -m bench --suite spec_bench|realistic: every drafter per category of an evaluation set
(specdec_core/eval_sets.py; never trained or tuned on), greedy, against our plain decoding.

Per category and method: speedup (the mean over its prompts of each prompt's paired ratio), mean
accepted tokens per target pass, their spread over the prompts, acceptance by draft depth, c in the
loop, and whether every output was token-identical to plain decoding; each prompt's own figures too.
Overall: the mean over categories with its standard error, so that a target read off a few prompts
a category shows how far the next prompts could move it. The head's first-position acceptance in the greedy chain
runs stands for its first-position agreement with the target (measured where it drafted).
"""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime

from specdec_core.config import DraftConfig
from specdec_core.drafters import DRAFT_BF16, DRAFT_EAGLE, DRAFT_EAGLE_TREE, DRAFT_HYBRID, DRAFT_NGRAM, make_drafter
from specdec_core.eval_sets import by_category
from specdec_core.machine import this_machine
from specdec_core.models import load_model
from specdec_core.prompts import encode_prompt, stop_token_ids
from specdec_core.sources import EMBEDDED_ID
from specdec_core.stats import c_in_run

from .measure import curve_fields, measure, ours, paired_ratio
from .paths import LEAN, ServedPaths, served_paths


def suite_report(args) -> dict:
    drafts, groups = _chosen(args)  # bad names fail here, before minutes of loading
    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    paths = served_paths(target)  # the lean pass, and the compiled passes where built here
    for path in paths.available:
        paths.use(path)
        for spec, _ in drafts.values():
            make_drafter(spec, target)  # load and measure each once, outside the timed runs
    report = {
        "when": datetime.now(UTC).isoformat(),
        "machine": this_machine().as_dict(),
        "args": vars(args),
        **curve_fields(paths.curves[LEAN]),
        "paths": {path: curve_fields(paths.curves[path]) for path in paths.available},
        "categories": {},
    }
    first = encode_prompt(target.tokenizer, next(iter(groups.values()))[0].text)
    measure(_methods(paths, first, 8, stops, drafts), 1)  # untimed: one-time set-up of every method's shapes
    for category, prompts in groups.items():
        rows = []
        for item in prompts:
            prompt = encode_prompt(target.tokenizer, item.text)
            timings, outputs = measure(_methods(paths, prompt, args.tokens, stops, drafts), args.repeats)
            rows.append(
                {
                    name: _method_row(t, timings[_baseline(name)], outputs[name] == outputs[PLAIN])
                    for name, t in timings.items()
                    if name != PLAIN
                }
            )
        report["categories"][category] = _category_summary(
            rows, [name for name in drafts if name.startswith("head k=")], [item.id for item in prompts]
        )
        print(
            f"[{category}] "
            + ", ".join(
                f"{m} {v['speedup']:.2f}x/{v['tokens_per_pass']:.2f}"
                for m, v in report["categories"][category]["methods"].items()
            ),
            flush=True,
        )
    report["overall"] = _overall(report["categories"])
    print(
        "\n".join(
            f"{m}: {v['speedup']:.2f}x ± {_or_nan(v['speedup_se']):.2f}, "
            f"{v['tokens_per_pass']:.2f} ± {_or_nan(v['tokens_per_pass_se']):.2f} tokens per pass"
            for m, v in report["overall"].items()
            if m != "all_identical"
        ),
        flush=True,
    )
    return report


def _chosen(args) -> tuple[dict, dict]:
    """The methods (name -> drafter spec, draft config) and categories (name -> prompts) to run."""
    drafts = {f"head k={k}": (DRAFT_EAGLE, DraftConfig(k=int(k))) for k in args.ks.split(",")} | {
        "head adaptive": (DRAFT_EAGLE, DraftConfig(k=3, adaptive=True)),
        "head tree k=3": (DRAFT_EAGLE_TREE, DraftConfig(k=3)),
        "head tree k=4": (DRAFT_EAGLE_TREE, DraftConfig(k=4)),
        "hybrid k=3": (DRAFT_HYBRID, DraftConfig(k=3)),
        "hybrid adaptive": (DRAFT_HYBRID, DraftConfig(k=3, adaptive=True)),
        "ngram k=3": (DRAFT_NGRAM, DraftConfig(k=3)),
        "ngram adaptive": (DRAFT_NGRAM, DraftConfig(k=3, adaptive=True)),
        "bf16 k=3": (DRAFT_BF16, DraftConfig(k=3)),
    }
    groups = by_category(args.suite, args.per_category)
    return only_named(drafts, args.methods, "--methods", "method"), only_named(
        groups, args.categories, "--categories", "category"
    )


def only_named(named: dict, wanted: str, option: str, what: str) -> dict:
    """The entries named in wanted (comma-separated; all where empty), in its order; an unknown name exits with the
    names to choose from."""
    if not wanted:
        return named
    names = wanted.split(",")
    if unknown := set(names) - set(named):
        raise SystemExit(f"{option}: no {what} named {sorted(unknown)}; choose from {sorted(named)}")
    return {name: named[name] for name in names}


PLAIN = "plain"


def on_path(name: str, path: str) -> str:
    """A method's name on a path: as it is on the lean pass, "<name> [compiled]" on the compiled passes."""
    return name if path == LEAN else f"{name} [{path}]"


def _baseline(name: str) -> str:
    """What a method's speedup is measured against: plain decoding on its own path; for the compiled path's plain
    decoding, the lean pass's (the speedup of compiling)."""
    path = name[name.index("[") + 1 : -1] if name.endswith("]") else LEAN
    baseline = on_path(PLAIN, path)
    return PLAIN if name == baseline else baseline


def _methods(paths: ServedPaths, prompt: list[int], tokens: int, stops, drafts: dict) -> dict:
    target, methods = paths.target, {}
    for path in paths.available:
        methods[on_path(PLAIN, path)] = paths.on(path, ours(target.model, prompt, tokens, stops))
        for name, (spec, config) in drafts.items():
            drafter = lambda spec=spec: make_drafter(spec, target)  # noqa: E731  (made after the switch: its costs)
            methods[on_path(name, path)] = paths.on(path, ours(target.model, prompt, tokens, stops, drafter, config))
    return methods


def _method_row(timing, plain, identical: bool) -> dict:
    return {
        "speedup": paired_ratio(timing.rates, plain.rates),
        "tokens_per_pass": timing.mean_accepted_length,
        "by_depth": timing.position_acceptance,
        "c": c_in_run(timing.draft_pass_seconds, plain.step_seconds),
        "identical": identical,
    }


FIGURES = ("speedup", "tokens_per_pass")  # what each prompt contributes, with a spread and a standard error


def _category_summary(rows: list[dict], chains: list[str], ids: list[str]) -> dict:
    def mean(method: str, field: str) -> float | None:
        values = [r[method][field] for r in rows if r[method][field] is not None]
        return statistics.mean(values) if values else None

    def spread(method: str, field: str) -> float | None:
        return statistics.stdev(r[method][field] for r in rows) if len(rows) > 1 else None

    methods = {
        m: {
            "speedup": mean(m, "speedup"),
            "tokens_per_pass": mean(m, "tokens_per_pass"),
            "c": mean(m, "c"),
            **{f"{field}_sd": spread(m, field) for field in FIGURES},
            "first_depth": statistics.mean(r[m]["by_depth"][0] for r in rows if r[m]["by_depth"])
            if any(r[m]["by_depth"] for r in rows)
            else None,
        }
        for m in rows[0]
    }
    best = max((m for m in chains if m in methods), key=lambda m: methods[m]["speedup"], default=None)
    per_prompt = [
        {"id": prompt_id, **{m: {field: row[m][field] for field in FIGURES} for m in row}}
        for prompt_id, row in zip(ids, rows)
    ]
    return {
        "methods": methods,
        "head_best_k": best,
        "prompts": len(rows),
        "all_identical": all(r[m]["identical"] for r in rows for m in r),
        "per_prompt": per_prompt,
    }


def _overall(categories: dict) -> dict:
    """Means over categories, as Spec-Bench reports them, each with its standard error: the categories are
    strata of equal weight, so SE = sqrt(sum over categories of sd^2 / n) / categories (None where a
    category has a single prompt)."""
    methods = next(iter(categories.values()))["methods"]

    def standard_error(method: str, field: str) -> float | None:
        parts = [(c["methods"][method][f"{field}_sd"], c["prompts"]) for c in categories.values()]
        if any(sd is None for sd, _ in parts):
            return None
        return math.sqrt(sum(sd * sd / n for sd, n in parts)) / len(parts)

    overall = {m: {} for m in methods}
    for m in methods:
        for f in FIGURES:
            overall[m][f] = statistics.mean(c["methods"][m][f] for c in categories.values())
            overall[m][f"{f}_se"] = standard_error(m, f)
    return overall | {"all_identical": all(c["all_identical"] for c in categories.values())}


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
