"""Benchmark: ours against transformers on the same pair, and measurement against theory.

    python -m bench [--repeats 3] [--tokens 64] [--k 3] [--head-k 4] [--prompts 2] [--out bench-results]
    python -m bench --drafters     # acceptance and speedup of each offline drafter
    python -m bench --costs [--force-avx2]   # this machine's c, T(n)/T(1), the head at k = 1..6
    python -m bench --suite spec_bench|realistic [--per-category 3] [--tokens 96]   # per category, every drafter
    python -m bench --bandwidth [--force-avx2]   # plain decoding against the memory-bandwidth bound; profile by op
    python -m bench --trees [--per-category 1] [--categories ...]   # tokens per pass of the head's chains and trees,
                                   # their modelled cost
    python -m bench --agreement HEAD[,HEAD] [--per-category 8] [--tokens 96] [--head-k 3] [--save-beside]
                                   # teacher-forced agreement on the evaluation sets
    python -m bench --first-start [--warm] [--tokens 32]   # app.py started, from its start to its first race
    python -m bench --server URL --model NAME [--baseline URL] [--sets spec_bench:qa,...] [--tokens 64] [--compare]
                                   # the workload check against a served model (served.py; key in OPENAI_API_KEY)

The prompts are the held-out split of the draft head's training prompts (training/draft_data.py): about
topics the head never saw, two structured and two creative by default. Everything is measured
in one process, on the same prompts, interleaved per prompt (in a rotated
order each repeat) so that drift of a noisy machine hits all methods alike. Ratios, not absolute
times, are the results: each is the median over repeats of the two methods' rates in that
repeat. Greedy throughout, except the creative adaptive-k check, which samples at temperature 1
(that is where drafts get rejected). Writes a JSON file to compare across commits.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from datetime import UTC, datetime

import torch

from specdec_core.config import DraftConfig, SamplingConfig
from specdec_core.cpu_kernels import force_avx2_path
from specdec_core.drafters import DRAFT_BF16, DRAFT_EAGLE, DRAFT_EARLY_EXIT, DRAFT_NGRAM, make_drafter
from specdec_core.drafters.model_draft import reduced_copy
from specdec_core.machine import this_machine
from specdec_core.models import load_model, load_stock
from specdec_core.prompts import encode_prompt, stop_token_ids
from specdec_core.sources import EMBEDDED_ID
from specdec_core.stats import c_in_run
from specdec_core.theory import expected_speedup

from .agreement import agreement_report
from .bandwidth import bandwidth_report
from .costs import cost_report
from .first_start import first_start_report
from .measure import Timing, bench_prompts, measure, ours, paired_ratio, peak_rss_mib, theirs, write_report
from .served import served_report
from .suite import suite_report
from .trees import tree_report


def set_assistant(assistant, num_tokens, schedule, threshold) -> None:
    """transformers reads these from the assistant's own generation config (and keeps state there)."""
    assistant.generation_config.num_assistant_tokens = num_tokens
    assistant.generation_config.num_assistant_tokens_schedule = schedule
    assistant.generation_config.assistant_confidence_threshold = threshold


def drafter_table(args) -> None:
    """Every offline drafter on the first structured and the first creative prompt, greedy, fixed k."""
    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    draft = DraftConfig(k=args.k)
    print(f"{'prompt':22s} {'drafter':24s} {'acceptance':>10s} {'tokens/pass':>11s} {'speedup':>8s}")
    for workload, item in bench_prompts(1):
        prompt = encode_prompt(target.tokenizer, item.text)
        methods = {"plain": ours(target.model, prompt, args.tokens, stops)}
        for spec in (DRAFT_EAGLE, DRAFT_BF16, DRAFT_NGRAM, DRAFT_EARLY_EXIT):
            make = lambda spec=spec: make_drafter(spec, target)  # noqa: E731
            methods[spec] = ours(target.model, prompt, args.tokens, stops, make, draft)
        timings, _ = measure(methods, args.repeats)
        for spec, t in timings.items():
            if spec != "plain":
                speedup = paired_ratio(t.rates, timings["plain"].rates)
                rate = "n/a" if t.acceptance_rate is None else f"{t.acceptance_rate:.2f}"  # nothing drafted
                print(
                    f"{workload + ' / ' + item.text[:12]:22s} {spec:24s} {rate:>10s} "
                    f"{t.mean_accepted_length:11.2f} {speedup:7.2f}x"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=3, help="fixed draft length for ours and transformers' same-k runs")
    parser.add_argument("--head-k", type=int, default=4, help="fixed draft length of the EAGLE head rows")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per workload")
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--drafters", action="store_true", help="only the per-drafter table (acceptance, speedup)")
    parser.add_argument(
        "--costs", action="store_true", help="only this machine's costs: c, T(n)/T(1), the head at each k"
    )
    parser.add_argument("--max-k", type=int, default=6, help="--costs: the head is run at k = 1..max-k")
    parser.add_argument(
        "--suite", choices=["spec_bench", "realistic"], help="per category: chain, tree, hybrid, n-gram, bf16"
    )
    parser.add_argument("--per-category", type=int, default=3, help="--suite: prompts per category")
    parser.add_argument("--ks", default="2,3,4", help="--suite: the head chain's fixed k values (the best is reported)")
    parser.add_argument("--methods", default="", help="--suite: only these methods, comma-separated (default: all)")
    parser.add_argument(
        "--categories", default="", help="--suite, --trees: only these categories, comma-separated (default: all)"
    )
    parser.add_argument(
        "--bandwidth",
        action="store_true",
        help="plain decoding as a fraction of the bandwidth bound; where a pass's time goes",
    )
    parser.add_argument(
        "--trees",
        action="store_true",
        help="tokens per pass of the head's chains and trees by shape and budget, with their modelled cost",
    )
    parser.add_argument(
        "--agreement",
        default="",
        help="teacher-forced agreement of these head folders (comma-separated) "
        "by category on the evaluation sets, at draft positions 1..--head-k",
    )
    parser.add_argument(
        "--save-beside",
        action="store_true",
        help="--agreement: also write each head's results into its folder "
        "(agreement.json, which the app's explainer quotes for the shipped head)",
    )
    parser.add_argument("--server", default="", help="an OpenAI-compatible server's base URL: check it (served.py)")
    parser.add_argument("--model", default="", help="--server: the model name it serves")
    parser.add_argument("--baseline", default="", help="--server: the same model served without speculation")
    parser.add_argument("--sets", default="structured", help="--server: prompt sets, comma-separated (the app's)")
    parser.add_argument("--timeout", type=float, default=60.0, help="--server: seconds one read may take")
    parser.add_argument(
        "--compare", action="store_true", help="--server: this engine's n-gram drafter beside it (embedded model)"
    )
    parser.add_argument("--lookup", default="3,1", help="--compare: the server's prompt_lookup_max,prompt_lookup_min")
    parser.add_argument(
        "--first-start",
        action="store_true",
        help="app.py started with empty caches: seconds to its page and to its first finished race (first_start.py)",
    )
    parser.add_argument("--warm", action="store_true", help="--first-start: with this machine's caches instead")
    parser.add_argument(
        "--force-avx2",
        action="store_true",
        help="run as on an AVX2-only CPU: every kernel capped at AVX2, no oneDNN bfloat16",
    )
    args = parser.parse_args()
    if args.force_avx2 and os.environ.get("SPECDEC_FORCE_AVX2") != "1":
        # The caps must be set before torch computes anything (cpu_kernels.AVX2_CAPS): start again with them.
        os.execve(
            sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], {**os.environ, "SPECDEC_FORCE_AVX2": "1"}
        )
    torch.set_num_threads(2)
    force_avx2_path(args.force_avx2)
    if args.drafters:
        drafter_table(args)
        return
    if args.costs:
        write_report(cost_report(args), args.out, "costs")
        return
    if args.bandwidth:
        write_report(bandwidth_report(args), args.out, "bandwidth")
        return
    if args.trees:
        write_report(tree_report(args), args.out, "trees")
        return
    if args.suite:
        write_report(suite_report(args), args.out, f"suite-{args.suite}")
        return
    if args.agreement:
        write_report(agreement_report(args), args.out, "agreement")
        return
    if args.server:
        write_report(served_report(args), args.out, "served")
        return
    if args.first_start:
        report = first_start_report(args)
        print(f"page after {report['page_s']} s, first race finished after {report['first_race_s']} s")
        write_report(report, args.out, "first-start")
        return

    target = load_model(EMBEDDED_ID)
    stops = stop_token_ids(target.tokenizer, target.model)
    # transformers as a user runs it: the same weights with stock nn.Linear (see cpu_kernels.py).
    # It cannot run an EAGLE head (assisted generation takes a whole causal LM as assistant), so its
    # best draft for this target is the bfloat16 copy: there is no smaller model of this family.
    stock_target = load_stock(EMBEDDED_ID, torch.float32)
    # transformers' generate with our kernels: packed linears, transformers' own layers and forward
    packed_target = load_model(EMBEDDED_ID, for_generate=True).model
    bf16_draft = reduced_copy(EMBEDDED_ID, torch.bfloat16, for_generate=True)
    stock_bf16_draft = load_stock(EMBEDDED_ID, torch.bfloat16)
    report: dict = {
        "when": datetime.now(UTC).isoformat(),
        "machine": this_machine().as_dict(),
        "platform": platform.platform(),
        "args": vars(args),
        "prompts": [],
    }
    k = args.k
    fixed, adaptive = DraftConfig(k=k), DraftConfig(k=k, adaptive=True)
    head_fixed, head_adaptive = DraftConfig(k=args.head_k), DraftConfig(k=args.head_k, adaptive=True)
    drafters = {"bf16": lambda: make_drafter(DRAFT_BF16, target), "ngram": lambda: make_drafter(DRAFT_NGRAM, target)}
    head = lambda: make_drafter(DRAFT_EAGLE, target)  # noqa: E731

    def assisted(model, draft, num_tokens, schedule, threshold, prompt, n):
        generate = theirs(model, prompt, n, stops, assistant_model=draft)
        return lambda: (set_assistant(draft, num_tokens, schedule, threshold), generate())[1]

    for workload, item in bench_prompts(args.prompts):
        prompt = encode_prompt(target.tokenizer, item.text)
        m, n = target.model, args.tokens
        methods = {"ours plain": ours(m, prompt, n, stops), "hf generate": theirs(stock_target, prompt, n, stops)}
        methods["ours eagle k"] = ours(m, prompt, n, stops, head, head_fixed)
        methods["ours eagle adaptive"] = ours(m, prompt, n, stops, head, head_adaptive)
        for name, make in drafters.items():
            methods[f"ours {name} k"] = ours(m, prompt, n, stops, make, fixed)
            methods[f"ours {name} adaptive"] = ours(m, prompt, n, stops, make, adaptive)
        methods["hf bf16 assisted defaults"] = assisted(stock_target, stock_bf16_draft, None, None, None, prompt, n)
        methods["hf bf16 assisted same k"] = assisted(stock_target, stock_bf16_draft, k, "constant", 0.0, prompt, n)
        methods["hf bf16 assisted same k, our kernels"] = assisted(
            packed_target, bf16_draft, k, "constant", 0.0, prompt, n
        )
        methods["hf ngram prompt lookup 10"] = theirs(stock_target, prompt, n, stops, prompt_lookup_num_tokens=10)
        methods["hf ngram prompt lookup same k"] = theirs(stock_target, prompt, n, stops, prompt_lookup_num_tokens=k)
        methods["hf ngram prompt lookup same k, our kernels"] = theirs(
            packed_target, prompt, n, stops, prompt_lookup_num_tokens=k
        )
        if workload == "creative":
            sampled = SamplingConfig(temperature=1.0, seed=0)
            methods["ours plain T=1"] = ours(m, prompt, n, stops, sampling=sampled)
            # An A/A control: the same run again, so the report shows how far noise alone moves a ratio.
            methods["ours plain T=1 again"] = ours(m, prompt, n, stops, sampling=sampled)
            methods["ours eagle k T=1"] = ours(m, prompt, n, stops, head, head_fixed, sampled)
            for name in drafters:
                methods[f"ours {name} adaptive T=1"] = ours(m, prompt, n, stops, drafters[name], adaptive, sampled)
        timings, outputs = measure(methods, args.repeats)
        ks = {"bf16": k, "eagle": args.head_k}
        report["prompts"].append(prompt_report(workload, item.text, timings, outputs, ks))
        print_prompt(report["prompts"][-1])

    report["summary"] = summarize_report(report["prompts"])
    report["peak_rss_mib"] = peak_rss_mib()
    print_summary(report["summary"], report["peak_rss_mib"])
    write_report(report, args.out, "bench")


def prompt_report(
    workload: str, name: str, timings: dict[str, Timing], outputs: dict[str, list[int]], ks: dict[str, int]
) -> dict:
    # c from the same runs: a draft pass over a decode step of plain decoding.
    costs = {d: c_in_run(timings[f"ours {d} k"].draft_pass_seconds, timings["ours plain"].step_seconds) for d in ks}
    row = {"workload": workload, "prompt": name, "c": costs, "k": ks, "methods": {}}
    reference = outputs["ours plain"]
    for method, t in timings.items():
        sampled = "T=1" in method
        base = timings["ours plain T=1" if sampled else "ours plain"]
        row["methods"][method] = {
            "median_seconds": t.median,
            "tokens": t.tokens[-1],
            "tokens_per_second": t.tokens_per_second,
            "rates": t.rates,
            "speedup_vs_ours_plain": paired_ratio(t.rates, base.rates),
            "identical_to_ours_plain": None if sampled else outputs[method] == reference,
            "acceptance_rate": t.acceptance_rate,
            "mean_accepted_length": t.mean_accepted_length,
            "acceptance_by_position": t.position_acceptance,
        }
    row["theory"] = {}
    for drafter, k in ks.items():
        a, c = timings[f"ours {drafter} k"].acceptance_rate or 0.0, costs[drafter]
        if c is None:  # too few drafting steps to time one (a run of a few tokens)
            continue
        theory = expected_speedup(a, k, c)
        measured = row["methods"][f"ours {drafter} k"]["speedup_vs_ours_plain"]
        row["theory"][drafter] = {
            "a": a,
            "c": c,
            "k": k,
            "theory": theory,
            "measured": measured,
            "measured_over_theory": measured / theory,
        }
    return row


RATIOS = {
    "ours plain / hf generate": ("hf generate", "ours plain"),
    "ours best bf16 / hf bf16 assisted defaults": ("hf bf16 assisted defaults", ("ours bf16 k", "ours bf16 adaptive")),
    "ours best bf16 / hf bf16 assisted same k": ("hf bf16 assisted same k", ("ours bf16 k", "ours bf16 adaptive")),
    "ours best ngram / hf prompt lookup 10": ("hf ngram prompt lookup 10", ("ours ngram k", "ours ngram adaptive")),
    "ours best ngram / hf prompt lookup same k": (
        "hf ngram prompt lookup same k",
        ("ours ngram k", "ours ngram adaptive"),
    ),
    # the same kernels on both sides: what is left is the loop and the drafting policy
    "ours bf16 k / hf bf16 same k, our kernels": ("hf bf16 assisted same k, our kernels", "ours bf16 k"),
    "ours ngram k / hf lookup same k, our kernels": ("hf ngram prompt lookup same k, our kernels", "ours ngram k"),
    # transformers cannot run an EAGLE head; its best draft for this target is the bf16 copy
    "ours best eagle / hf bf16 assisted defaults": (
        "hf bf16 assisted defaults",
        ("ours eagle k", "ours eagle adaptive"),
    ),
    "ours best eagle / ours best bf16": (
        ("ours bf16 k", "ours bf16 adaptive"),
        ("ours eagle k", "ours eagle adaptive"),
    ),
}


def speed_ratio(methods: dict, theirs_names, ours_names) -> float:
    """Our best method over their best (the best of each side by median rate)."""

    def best(names) -> str:
        names = (names,) if isinstance(names, str) else names
        return max(names, key=lambda n: statistics.median(methods[n]["rates"]))

    return paired_ratio(methods[best(ours_names)]["rates"], methods[best(theirs_names)]["rates"])


def summarize_report(rows: list[dict]) -> dict:
    summary: dict = {}
    for workload in ("structured", "creative"):
        mine = [r for r in rows if r["workload"] == workload]
        entry = {
            name: statistics.median(speed_ratio(r["methods"], t, o) for r in mine) for name, (t, o) in RATIOS.items()
        }
        speedups = [m for m in mine[0]["methods"] if m.startswith("ours") and m not in ("ours plain", "ours plain T=1")]
        for method in speedups:
            entry[f"speedup {method}"] = statistics.median(r["methods"][method]["speedup_vs_ours_plain"] for r in mine)
        for drafter in dict.fromkeys(d for r in mine for d in r["theory"]):
            timed = [r["theory"][drafter] for r in mine if drafter in r["theory"]]
            entry[f"c ({drafter})"] = statistics.median(t["c"] for t in timed)
            entry[f"measured / theory ({drafter}, k)"] = statistics.median(t["measured_over_theory"] for t in timed)
        entry["eagle acceptance by position"] = [
            round(statistics.median(p), 3)
            for p in zip(*[r["methods"]["ours eagle k"]["acceptance_by_position"] for r in mine], strict=False)
        ]
        entry["all greedy outputs identical"] = all(
            v["identical_to_ours_plain"] is not False for r in mine for v in r["methods"].values()
        )
        summary[workload] = entry
    return summary


def print_prompt(row: dict) -> None:
    costs = ", ".join(f"c({d}) = " + ("n/a" if c is None else f"{c:.3f}") for d, c in row["c"].items())
    print(f"\n[{row['workload']}] {row['prompt'][:70]!r}  ({costs})")
    for method, v in row["methods"].items():
        ident = {None: "  ", True: "= ", False: "≠ "}[v["identical_to_ours_plain"]]
        a = "" if v["acceptance_rate"] is None else f"  a={v['acceptance_rate']:.2f} L={v['mean_accepted_length']:.2f}"
        print(
            f"  {ident}{method:42s} {v['median_seconds']:6.2f}s {v['tokens_per_second']:6.1f} tok/s "
            f"{v['speedup_vs_ours_plain']:5.2f}x{a}"
        )
    for drafter, t in row["theory"].items():
        print(
            f"  theory {drafter} k={t['k']}: a={t['a']:.2f} c={t['c']:.3f} -> {t['theory']:.2f}x; "
            f"measured {t['measured']:.2f}x ({t['measured_over_theory']:.2f})"
        )
    print(f"  eagle acceptance by draft position: {row['methods']['ours eagle k']['acceptance_by_position']}")


def print_summary(summary: dict, rss: float) -> None:
    print("\n=== medians over prompts (ratios > 1: ours faster) ===")
    names = list(dict.fromkeys([*summary["structured"], *summary["creative"]]))  # creative adds the T=1 rows
    print(f"{'':52s} {'structured':>11s} {'creative':>11s}")
    for name in names:
        cells = []
        for workload in ("structured", "creative"):
            v = summary[workload].get(name)
            cells.append(f"{v:11.3f}" if isinstance(v, float) else f"{'' if v is None else str(v):>11s}")
        print(f"{name:52s} {' '.join(cells)}")
    print(f"peak RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
