"""python -m bench --costs: what this machine's costs make of the head: c of each drafter (at load
and in the loop), the verification cost curve, and the head's speedup at each k and with adaptive k."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime

import torch

from specdec_core.config import DraftConfig
from specdec_core.drafters import DRAFT_BF16, DRAFT_EAGLE, DRAFT_EARLY_EXIT, make_drafter
from specdec_core.machine import this_machine
from specdec_core.models import load_model
from specdec_core.prompts import encode_prompt, stop_token_ids
from specdec_core.sources import EMBEDDED_ID
from specdec_core.stats import c_in_run
from specdec_core.tuning import c_at_load, draft_pass, tuning_of

from .measure import bench_prompts, curve_fields, measure, ours, paired_ratio


def cost_report(args) -> dict:
    """What this machine's costs make of the head: c of each drafter (at load and in the loop), the
    verification cost curve, and the head's speedup at each k and with adaptive k on held-out prompts."""
    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    tuning = tuning_of(EMBEDDED_ID, torch.float32)
    curve = tuning.curve
    specs = (DRAFT_EAGLE, DRAFT_BF16, DRAFT_EARLY_EXIT)
    for spec in specs:
        make_drafter(spec, target)  # loads and measures each once, outside the timed runs
    report = {
        "when": datetime.now(UTC).isoformat(),
        "machine": this_machine().as_dict(),
        "args": vars(args),
        "target_kernels": tuning.kernels.describe(),
        **curve_fields(curve),
        "c_at_load": {spec: c_at_load(EMBEDDED_ID, torch.float32, spec) for spec in specs},
        "draft_kernels": {spec: draft_pass(EMBEDDED_ID, spec)[1] for spec in specs},
        "prompts": [],
    }
    head = lambda: make_drafter(DRAFT_EAGLE, target)  # noqa: E731
    ks = range(1, args.max_k + 1)
    for workload, item in bench_prompts(args.prompts):
        prompt = encode_prompt(target.tokenizer, item.text)
        m, n = target.model, args.tokens
        methods = {"plain": ours(m, prompt, n, stops)}
        methods |= {f"head k={k}": ours(m, prompt, n, stops, head, DraftConfig(k=k)) for k in ks}
        methods["head adaptive"] = ours(m, prompt, n, stops, head, DraftConfig(k=args.head_k, adaptive=True))
        methods["bf16 k=3"] = ours(m, prompt, n, stops, lambda: make_drafter(DRAFT_BF16, target), DraftConfig(k=3))
        timings, outputs = measure(methods, args.repeats)
        plain = timings["plain"]
        row = {"workload": workload, "prompt": item.text, "methods": {}}
        for name, t in timings.items():
            row["methods"][name] = {
                "speedup": paired_ratio(t.rates, plain.rates),
                "tokens_per_pass": t.mean_accepted_length,
                "c_in_loop": c_in_run(t.draft_pass_seconds, plain.step_seconds),
                "identical": outputs[name] == outputs["plain"],
            }
        report["prompts"].append(row)
        print(
            f"[{workload}] {item.text[:60]!r}: "
            + ", ".join(f"{name} {v['speedup']:.2f}x" for name, v in row["methods"].items() if name != "plain"),
            flush=True,
        )
    report["summary"] = cost_summary(report["prompts"], [f"head k={k}" for k in ks])
    return report


def cost_summary(rows: list[dict], fixed: list[str]) -> dict:
    """Mean over prompts per method; the head's best fixed k; adaptive against plain and the best k per prompt."""

    def mean(method: str, field: str) -> float:
        return statistics.mean(r["methods"][method][field] for r in rows)

    best = max(fixed, key=lambda name: mean(name, "speedup"))
    return {
        "mean_speedup": {name: mean(name, "speedup") for name in rows[0]["methods"] if name != "plain"},
        "mean_tokens_per_pass": {name: mean(name, "tokens_per_pass") for name in fixed + ["head adaptive"]},
        "head_c_in_loop": statistics.median(r["methods"][best]["c_in_loop"] for r in rows),
        "bf16_c_in_loop": statistics.median(r["methods"]["bf16 k=3"]["c_in_loop"] for r in rows),
        "head_best_k": best,
        "adaptive_worst_vs_plain": min(r["methods"]["head adaptive"]["speedup"] for r in rows),
        "adaptive_worst_vs_best_k": min(
            r["methods"]["head adaptive"]["speedup"] / r["methods"][best]["speedup"] for r in rows
        ),
        "all_identical": all(v["identical"] for r in rows for v in r["methods"].values()),
    }
