"""A workload check's results, whatever ran the prompts: per-prompt rows (repeats reduced to a median and a
min–max spread, the output and its copy flag) turned into the page's table, the verdict per set, and the CSV
and JSON downloads, each carrying the check's configuration.

A source of measurements (this process's decoders, or a served model) builds one row per prompt with
prompt_row() and hands the rows with its CheckConfig to the functions here.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path
from typing import Protocol

from .check_config import CheckConfig, decoding_name
from .copying import copies_prompt, copy_share
from .repeats import Spread
from .workloads import WorkloadPrompt

TABLE_COLUMNS = [
    "workload",
    "prompt",
    "temperature",
    "tok_s_plain",
    "tok_s_spec",
    "speedup",
    "spread",
    "acceptance_rate",
    "mean_accepted_length",
    "identical",
    "copy_share",
    "output_start",
]
# What the table shows above each field (the CSV/JSON keep the field names); short, so no header breaks a word.
COLUMN_HEADERS = {
    "workload": "Set",
    "prompt": "Prompt",
    "temperature": "Temp.",
    "tok_s_plain": "Plain tok/s",
    "tok_s_spec": "Spec. tok/s",
    "speedup": "Speedup ×",
    "spread": "Min–max ×",
    "acceptance_rate": "Accepted / drafted",
    "mean_accepted_length": "Tokens / pass",
    "identical": "Same as plain",
    "copy_share": "Copied",
    "output_start": "Output (start)",
    "k": "k",
}
OUTPUT_START = 48  # characters of the output the table shows; the viewer below it shows the whole
PAYS, LOSES = 1.05, 0.95  # a set's speedup above PAYS pays, below LOSES costs; between, a wash


class RunSummary(Protocol):
    """What a source reports of one decoder's run of one prompt (specdec_core.Summary has these)."""

    tokens: int

    @property
    def tokens_per_second(self) -> float: ...

    @property
    def acceptance_rate(self) -> float | None: ...

    @property
    def mean_accepted_length(self) -> float: ...


def prompt_row(
    item: WorkloadPrompt, plain: list[RunSummary], spec: list[RunSummary], output: str, identical: bool | None
) -> dict:
    """One prompt's row from its repeats, in pairs (plain[i] ran next to spec[i]): speed and speedup as
    medians with the speedup's min–max; acceptance from the first speculative run (the same seed repeats the
    same tokens, so only the timing varies)."""
    speedups = Spread.of([speedup_of(p, s) for p, s in zip(plain, spec, strict=True)])
    share = copy_share(output, item.text)
    return {
        "workload": item.workload,
        "prompt": item.name,
        "decoding": decoding_name(item.temperature),
        "temperature": item.temperature,
        "repeats": speedups.repeats,
        "tokens_plain": plain[0].tokens,
        "tokens_spec": spec[0].tokens,
        "tok_s_plain": round(Spread.of([p.tokens_per_second for p in plain]).median, 2),
        "tok_s_spec": round(Spread.of([s.tokens_per_second for s in spec]).median, 2),
        "speedup": speedups.median,
        "speedup_min": speedups.low,
        "speedup_max": speedups.high,
        "acceptance_rate": None if spec[0].acceptance_rate is None else round(spec[0].acceptance_rate, 3),
        "mean_accepted_length": round(spec[0].mean_accepted_length, 2),
        "identical": identical,
        "copy_share": None if share is None else round(share, 3),
        "copies_prompt": copies_prompt(share),
        "prompt_text": item.text,
        "output": output,
    }


def speedup_of(plain: RunSummary, spec: RunSummary) -> float:
    """Tokens per second of speculative over plain, each on its own clock."""
    return round(spec.tokens_per_second / plain.tokens_per_second, 3) if plain.tokens_per_second else 0.0


def table(rows: list[dict]) -> list[list]:
    return [[_cell(row, column) for column in TABLE_COLUMNS] for row in rows]


def _cell(row: dict, column: str) -> object:
    if column == "spread":
        return f"{row['speedup_min']:.2f}–{row['speedup_max']:.2f}"
    if column == "copy_share":
        return copy_cell(row)
    if column == "output_start":
        text = " ".join(row["output"].split())
        return text if len(text) <= OUTPUT_START else text[:OUTPUT_START] + "…"
    return row[column]


def copy_cell(row: dict) -> str:
    if row["copy_share"] is None:
        return "n/a (short)"
    return f"{row['copy_share']:.0%}" + (" ⚠ copies" if row["copies_prompt"] else "")


def verdicts(rows: list[dict]) -> list[dict]:
    """Per set: the speedup of all its prompts' tokens over all their time (median tokens/s of each), the
    range of its prompts' speedups, the verdict, and how many outputs mostly copy their prompt."""
    found = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        plain_s = sum(r["tokens_plain"] / r["tok_s_plain"] for r in mine if r["tok_s_plain"])
        spec_s = sum(r["tokens_spec"] / r["tok_s_spec"] for r in mine if r["tok_s_spec"])
        spec_rate = sum(r["tokens_spec"] for r in mine) / spec_s if spec_s else 0.0
        plain_rate = sum(r["tokens_plain"] for r in mine) / plain_s if plain_s else 0.0
        speedup = round(spec_rate / plain_rate, 3) if plain_rate else 0.0
        verdict = "speculation pays" if speedup > PAYS else ("no gain: leave it off" if speedup < LOSES else "a wash")
        found.append(
            {
                "workload": workload,
                "prompts": len(mine),
                "speedup": speedup,
                "prompt_speedup_min": min(r["speedup"] for r in mine),
                "prompt_speedup_max": max(r["speedup"] for r in mine),
                "verdict": verdict,
                "copying_outputs": sum(r["copies_prompt"] for r in mine),
            }
        )
    return found


def advice(rows: list[dict]) -> str:
    lines = ["**Per set** (all its prompts' tokens over all their time, median of the repeats):"]
    for v in verdicts(rows):
        spread = f" (each prompt {v['prompt_speedup_min']:.2f}× to {v['prompt_speedup_max']:.2f}×)"
        copying = (
            f" {v['copying_outputs']} of its outputs mostly copy the prompt: there the gain is lookup of the prompt."
            if v["copying_outputs"]
            else ""
        )
        lines.append(
            f"- **{v['workload']}**: {v['speedup']:.2f}× over {v['prompts']} prompts"
            f"{spread if v['prompts'] > 1 else ''}: {v['verdict']}.{copying}"
        )
    lines.append(
        "\nThe gain depends on the workload: measure yours both ways before making speculation a global setting."
    )
    return "\n".join(lines)


def write_downloads(config: CheckConfig, rows: list[dict]) -> list[str]:
    """workload_check.csv (one row per prompt, the configuration in columns) and workload_check.json
    ({"config", "workloads", "prompts"})."""
    folder = Path(tempfile.mkdtemp(prefix="workload-check-"))
    csv_path, json_path = folder / "workload_check.csv", folder / "workload_check.json"
    report = {"config": config.as_dict(), "workloads": verdicts(rows), "prompts": rows}
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*rows[0], *config.columns()])
        writer.writeheader()
        writer.writerows({**row, **config.columns()} for row in rows)
    return [str(csv_path), str(json_path)]
