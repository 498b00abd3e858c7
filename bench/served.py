"""python -m bench --server URL: the workload check against a served model, from the command line.

Each prompt of the chosen sets goes to the server alone, streamed, its speculative counters read around it; with
--baseline, the same prompt to a server of the same model without speculation (the speedup); with --compare, the
same prompt through this engine's n-gram drafter on the embedded model at the server's k and lookup window.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from dataclasses import asdict

from app.copying import copy_share
from app.workloads import select_prompts
from specdec_core.models import load_model
from specdec_core.served.addresses import server_address
from specdec_core.served.check import (
    ServedPrompt,
    SetResult,
    by_workload,
    check_prompt,
    counts_record,
    draft_length,
    prompt_record,
)
from specdec_core.served.client import ServerClient
from specdec_core.served.compare import Lookup, comparison_record, side_by_side
from specdec_core.sources import EMBEDDED_ID

MAX_SECONDS = 600.0


def served_report(args: argparse.Namespace) -> dict:
    # set by set: the app's limit on prompts per check is for a shared demo, not for the owner's command line
    items = [item for name in args.sets.split(",") if name for item in select_prompts([name], "", 0.0)]
    prompts = [ServedPrompt(p.workload, p.name, p.text, p.temperature) for p in items]
    key = os.environ.get("OPENAI_API_KEY", "")  # from the environment only: a command line is seen by others
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(ServerClient(server_address(args.server), args.model, key, args.timeout))
        baseline = None
        if args.baseline:
            baseline = stack.enter_context(ServerClient(server_address(args.baseline), args.model, key, args.timeout))
        return _report(args, prompts, server, baseline)


def _report(args, prompts: list[ServedPrompt], server: ServerClient, baseline: ServerClient | None) -> dict:
    lookup = None
    if args.compare:
        high, low = (int(n) for n in args.lookup.split(","))
        lookup = Lookup(draft_length(server) or 0, high, low)
    target = load_model(EMBEDDED_ID) if lookup else None
    results, rows = [], []
    print(
        f"{'workload / prompt':40s} {'tokens':>6s} {'tok/s':>7s} {'accept':>6s} {'tok/pass':>8s} {'speedup':>7s} "
        f"{'copied':>6s}"
    )
    for prompt in prompts:
        result = check_prompt(server, prompt, args.tokens, MAX_SECONDS, baseline)
        row = prompt_record(result) | {"copy_share": copy_share(result.completion.text, prompt.text)}
        if target is not None and result.completion.token_ids and prompt.temperature == 0:
            side = side_by_side(target, prompt.text, result.completion.token_ids, lookup, args.tokens)
            row |= comparison_record(side, result.counts)
        results.append(result)
        rows.append(row)
        print_row(row)
    sets = [set_record(s) for s in by_workload(results)]
    for s in sets:
        print(s)
    return {"server_model": args.model, "tokens": args.tokens, "lookup": asdict(lookup) if lookup else None,
            "sets": sets, "prompts": rows}  # fmt: skip


def print_row(row: dict) -> None:
    def shown(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    name = f"{row['workload']} / {row['prompt']}"[:40]
    print(
        f"{name:40s} {row['completion_tokens']:6d} {row['tok_s']:7.1f} {shown(row['acceptance_rate']):>6s} "
        f"{shown(row['tokens_per_pass']):>8s} {shown(row['speedup']):>7s} {shown(row['copy_share']):>6s}"
        + (
            f"  ours: {shown(row['ours_tokens_per_pass'])} tok/pass, identical {row['identical']}"
            if "identical" in row
            else ""
        )
    )


def set_record(s: SetResult) -> dict:
    return {
        "workload": s.workload,
        "prompts": s.prompts,
        **counts_record(s.counts),
        "tok_s": s.tokens_per_second,
        "baseline_tok_s": s.baseline_tokens_per_second,
        "speedup": s.speedup,
        "verdict": s.verdict,
    }
