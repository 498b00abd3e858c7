"""The Workload check tab's handlers: each prompt of the chosen sets through both decoders, and the k sweep.

Both run with the Race tab's target, drafter and k, each decoder to its end in turn, so every tokens-per-second
figure is measured on a CPU the other decoder is not using.
"""

from __future__ import annotations

import csv
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import gradio as gr

from specdec_core import DraftConfig, Summary

from . import workload_charts
from .decoders import both_runs, plain_run, prompted_target, run_to_end, spec_run
from .inputs import number, parse_settings, shown_as_message
from .race import PLAIN, SPEC
from .workloads import WorkloadPrompt, select_prompts

TABLE_COLUMNS = [
    "workload",
    "prompt",
    "temperature",
    "tok_s_plain",
    "tok_s_spec",
    "speedup",
    "acceptance_rate",
    "mean_accepted_length",
    "identical",
]
SWEEP_COLUMNS = ["k", "speedup", "acceptance_rate", "mean_accepted_length"]
SWEEP_KS = range(1, 9)
# What the tables show above each field (the CSV/JSON downloads keep the field names).
COLUMN_HEADERS = {
    "workload": "Workload",
    "prompt": "Prompt",
    "temperature": "Temperature",
    "tok_s_plain": "Plain (tokens/s)",
    "tok_s_spec": "Speculative (tokens/s)",
    "speedup": "Speedup (×)",
    "acceptance_rate": "Acceptance (accepted / drafted)",
    "mean_accepted_length": "Tokens per target pass",
    "identical": "Same output as plain (greedy)",
    "k": "Draft length k",
}


def run_workload(
    sets: list[str],
    own_prompts: str,
    own_temperature: float,
    target: str,
    drafter: str,
    k: float,
    adaptive: bool,
    max_new_tokens: float,
) -> Iterator[tuple]:
    """Each prompt through both decoders in turn; yields (status, table, chart, download files)."""
    with shown_as_message():
        prompts = select_prompts(list(sets or []), own_prompts, number("temperature", own_temperature))
        rows: list[dict] = []
        for i, item in enumerate(prompts):
            running = f"Running prompt {i + 1} of {len(prompts)}: {item.workload} / {item.name}…"
            yield running, _table(rows, TABLE_COLUMNS), gr.skip(), gr.skip()
            rows.append(_measured_row(item, target, drafter, k, adaptive, max_new_tokens))
            done = f"Done {i + 1} of {len(prompts)}."
            yield done, _table(rows, TABLE_COLUMNS), workload_charts.workload_figure(rows), gr.skip()
    yield _advice(rows), _table(rows, TABLE_COLUMNS), workload_charts.workload_figure(rows), _write_downloads(rows)


def _measured_row(
    item: WorkloadPrompt,
    target: str,
    drafter: str,
    k: float,
    adaptive: bool,
    max_new_tokens: float,
) -> dict:
    """One prompt through both decoders, each to its end: its row of the table."""
    greedy = item.temperature == 0
    decoding = "greedy" if greedy else "sampling"
    settings = parse_settings(target, drafter, k, adaptive, decoding, item.temperature, 0, 1.0, 0, max_new_tokens)
    runs = both_runs(settings, prompted_target(settings, item.text))
    plain_tokens, plain = run_to_end(runs[PLAIN])
    spec_tokens, spec = run_to_end(runs[SPEC])
    return _workload_row(item, plain, spec, plain_tokens == spec_tokens if greedy else None)


def _workload_row(item: WorkloadPrompt, plain: Summary, spec: Summary, identical: bool | None) -> dict:
    return {
        "workload": item.workload,
        "prompt": item.name,
        "temperature": item.temperature,
        "tokens_plain": plain.tokens,
        "tokens_spec": spec.tokens,
        "tok_s_plain": round(plain.tokens_per_second, 2),
        "tok_s_spec": round(spec.tokens_per_second, 2),
        "speedup": _speedup(plain, spec),
        "acceptance_rate": _acceptance(spec),
        "mean_accepted_length": round(spec.mean_accepted_length, 2),
        "identical": identical,
    }


def _speedup(plain: Summary, spec: Summary) -> float:
    return round(spec.tokens_per_second / plain.tokens_per_second, 3) if plain.tokens_per_second else 0.0


def _acceptance(spec: Summary) -> float | None:
    return None if spec.acceptance_rate is None else round(spec.acceptance_rate, 3)


def _table(rows: list[dict], columns: list[str]) -> list[list]:
    return [[row[column] for column in columns] for row in rows]


def _advice(rows: list[dict]) -> str:
    lines = ["**Per workload** (tokens per second of all its prompts together):"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        plain_s = sum(r["tokens_plain"] / r["tok_s_plain"] for r in mine if r["tok_s_plain"])
        spec_s = sum(r["tokens_spec"] / r["tok_s_spec"] for r in mine if r["tok_s_spec"])
        speedup = (sum(r["tokens_spec"] for r in mine) / spec_s) / (sum(r["tokens_plain"] for r in mine) / plain_s)
        verdict = "speculation pays" if speedup > 1.05 else ("no gain: leave it off" if speedup < 0.95 else "a wash")
        lines.append(f"- **{workload}**: {speedup:.2f}× over {len(mine)} prompts{_spread(mine)}: {verdict}.")
    lines.append(
        "\nThe gain depends on the workload: measure yours both ways before making speculation a global setting."
    )
    return "\n".join(lines)


def _spread(rows: list[dict]) -> str:
    """The per-prompt range, so that a verdict read off a few prompts shows how far they disagree."""
    if len(rows) < 2:
        return ""
    speedups = [r["speedup"] for r in rows]
    return f" (each prompt {min(speedups):.2f}× to {max(speedups):.2f}×)"


def _write_downloads(rows: list[dict]) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="workload-check-"))
    json_path, csv_path = folder / "workload_check.json", folder / "workload_check.csv"
    json_path.write_text(json.dumps(rows, indent=2))
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return [str(csv_path), str(json_path)]


def run_sweep(prompt: str, target: str, drafter: str, max_new_tokens: float) -> Iterator[tuple]:
    """Greedy speedup and acceptance for k = 1..8 against one plain run; yields (status, chart, table)."""
    with shown_as_message():
        settings = parse_settings(target, drafter, 1, False, "greedy", 0, 0, 1.0, 0, max_new_tokens)
        yield "Running plain decoding once as the baseline…", gr.skip(), []
        prompted = prompted_target(settings, prompt)
        _, plain = run_to_end(plain_run(settings, prompted))
        rows: list[dict] = []
        for k in SWEEP_KS:
            _, spec = run_to_end(spec_run(settings, prompted, DraftConfig(k=k)))
            rows.append(
                {
                    "k": k,
                    "speedup": _speedup(plain, spec),
                    "acceptance_rate": _acceptance(spec),
                    "mean_accepted_length": round(spec.mean_accepted_length, 2),
                }
            )
            yield f"k = {k} done.", workload_charts.sweep_figure(rows), _table(rows, SWEEP_COLUMNS)
    best = max(rows, key=lambda r: r["speedup"])
    status = f"Best k = {best['k']}: {best['speedup']:.2f}× (acceptance {best['acceptance_rate']})."
    yield status, workload_charts.sweep_figure(rows), _table(rows, SWEEP_COLUMNS)
