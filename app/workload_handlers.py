"""The Workload check tab's handlers: each prompt of the chosen sets through both decoders, repeated, and the
k sweep, repeated.

Both run with the Race tab's target, drafter and k, each decoder to its end in turn (plain, then speculative,
once per repeat), so every tokens-per-second figure is measured on a CPU the other decoder is not using, and
slow drift of a shared machine touches both sides of a pair alike.
"""

from __future__ import annotations

import html
from collections.abc import Iterator

import gradio as gr

from specdec_core import DraftConfig, SpecDecError, Summary
from specdec_core.machine import this_machine
from specdec_core.sources import public_mode

from . import workload_charts, workload_report
from .check_config import CheckConfig, check_config, decoding_name, running_commit
from .decoders import PromptedTarget, plain_run, prompted_target, run_to_end, spec_run
from .inputs import RaceSettings, number, parse_settings, shown_as_message
from .repeats import Spread, best_k_line, best_of
from .workloads import WorkloadPrompt, select_prompts

MAX_REPEATS = 5
# A default check (8 prompts, 48 tokens) stays near a minute and a half with 3 repeats on 2 cores; a public
# machine serves visitors one run at a time, so it repeats twice.
DEFAULT_REPEATS = 2 if public_mode() else 3
SWEEP_COLUMNS = ["k", "speedup", "acceptance_rate", "mean_accepted_length", "spread"]
SWEEP_HEADERS = ["k", "Speedup × (median)", "Accepted / drafted", "Tokens / pass", "Min–max ×"]
SWEEP_KS = range(1, 9)
Pair = tuple[list[int], Summary, list[int], Summary]  # one repeat: plain tokens and summary, then speculative


def run_workload(
    sets: list[str],
    own_prompts: str,
    own_temperature: float,
    target: str,
    drafter: str,
    k: float,
    adaptive: bool,
    max_new_tokens: float,
    repeats: float = DEFAULT_REPEATS,
) -> Iterator[tuple]:
    """Each prompt through both decoders, `repeats` times in pairs; yields check_outputs() as it goes."""
    with shown_as_message():
        prompts = select_prompts(list(sets or []), own_prompts, number("temperature", own_temperature))
        count = _repeats(repeats)
        first = _settings(prompts[0], target, drafter, k, adaptive, max_new_tokens)
        config = check_config(
            target,
            drafter,
            first.draft.k,
            first.draft.adaptive,
            first.generation.max_new_tokens,
            count,
            {item.workload: decoding_name(item.temperature) for item in prompts},
        )
        rows: list[dict] = []
        for i, item in enumerate(prompts):
            settings = _settings(item, target, drafter, k, adaptive, max_new_tokens)
            prompted = prompted_target(settings, item.text)
            pairs: list[Pair] = []
            for r in range(count):
                running = (
                    f"Prompt {i + 1} of {len(prompts)} ({item.workload} / {item.name}), repeat {r + 1} of {count}…"
                )
                yield check_outputs(config, rows, running, done=False)
                pairs.append(_pair(settings, prompted))
            rows.append(_row(item, prompted, pairs))
        yield check_outputs(config, rows, workload_report.advice(rows), done=True)


def check_outputs(config: CheckConfig, rows: list[dict], status: str, done: bool) -> tuple:
    """The tab's outputs for the rows so far, whichever source measured them: (status, table, chart,
    downloads, configuration, rows, output picker); the downloads and the picker once the check is done."""
    chart = workload_charts.workload_figure(rows) if rows else gr.skip()
    files = workload_report.write_downloads(config, rows) if done else gr.skip()
    picker_update = picker(rows, done)
    return status, workload_report.table(rows), chart, files, config.as_html(), rows, picker_update


def show_output(index: int | None, rows: list[dict] | None) -> tuple[str, str, str]:
    """One prompt's copy flag, prompt and whole speculative output, for the viewer under the table."""
    if index is None or not rows or not 0 <= int(index) < len(rows):
        return "", "", ""
    row = rows[int(index)]
    flag = (
        "**mostly copies the prompt**: its speedup measures lookup of the prompt"
        if row["copies_prompt"]
        else "does not mostly copy the prompt"
    )
    note = (
        f"**{html.escape(row['workload'])} / {html.escape(row['prompt'])}** ({row['decoding']}): copied "
        f"{workload_report.copy_cell(row)}, {flag}.{_speedup_note(row)}"
    )
    return note, row["prompt_text"], row["output"]


def _speedup_note(row: dict) -> str:
    """A local row's median with its spread; a served row's speedup over the baseline server, where one ran."""
    if row.get("speedup") is None:
        return ""
    if "speedup_min" not in row:
        return f" Speedup {row['speedup']:.2f}× over the baseline server."
    return (
        f" Speedup {row['speedup']:.2f}× ({row['speedup_min']:.2f}–{row['speedup_max']:.2f}× over "
        f"{row['repeats']} repeats)."
    )


def picker(rows: list[dict], done: bool) -> dict:
    """Emptied while a check starts and set to the first prompt when it ends, so that the viewer follows
    each new check (a picker left on the same value would not fire its change event)."""
    if not done:
        return gr.update(choices=[], value=None) if not rows else gr.skip()
    flagged = {True: " ⚠ copies the prompt", False: ""}
    choices = [(f"{r['workload']} / {r['prompt']}{flagged[r['copies_prompt']]}", i) for i, r in enumerate(rows)]
    return gr.update(choices=choices, value=0)


def _settings(
    item: WorkloadPrompt, target: str, drafter: str, k: float, adaptive: bool, max_new_tokens: float
) -> RaceSettings:
    decoding = "greedy" if item.temperature == 0 else "sampling"
    return parse_settings(target, drafter, k, adaptive, decoding, item.temperature, 0, 1.0, 0, max_new_tokens)


def _repeats(value: object) -> int:
    count = number("repeats", value, integer=True)
    if not 1 <= count <= MAX_REPEATS:
        raise SpecDecError(f"repeats must be 1 to {MAX_REPEATS}, got {count}.")
    return count


def _pair(settings: RaceSettings, prompted: PromptedTarget) -> Pair:
    """One repeat: plain decoding to its end, then speculative decoding to its end."""
    plain_tokens, plain = run_to_end(plain_run(settings, prompted))
    spec_tokens, spec = run_to_end(spec_run(settings, prompted))
    return plain_tokens, plain, spec_tokens, spec


def _row(item: WorkloadPrompt, prompted: PromptedTarget, pairs: list[Pair]) -> dict:
    """Greedy outputs must match in every repeat; the same seed repeats a sampled output, so the first
    speculative output stands for all."""
    identical = all(p == s for p, _, s, _ in pairs) if item.temperature == 0 else None
    output = prompted.target.tokenizer.decode(pairs[0][2], skip_special_tokens=True)
    plain, spec = [pair[1] for pair in pairs], [pair[3] for pair in pairs]
    return workload_report.prompt_row(item, plain, spec, output, identical)


def run_sweep(
    prompt: str, target: str, drafter: str, max_new_tokens: float, repeats: float = DEFAULT_REPEATS
) -> Iterator[tuple]:
    """Greedy speedup and acceptance for k = 1..8, `repeats` rounds of one plain run and one run per k; each
    k's speedup is its tokens/s over the median plain tokens/s, so its spread is its own runs' spread.
    Yields (status, chart, table)."""
    with shown_as_message():
        settings = parse_settings(target, drafter, 1, False, "greedy", 0, 0, 1.0, 0, max_new_tokens)
        count = _repeats(repeats)
        prompted = prompted_target(settings, prompt)
        plain: list[float] = []
        spec: dict[int, list[Summary]] = {}
        for r in range(count):
            yield f"Repeat {r + 1} of {count}: plain decoding, the baseline…", gr.skip(), gr.skip()
            plain.append(run_to_end(plain_run(settings, prompted))[1].tokens_per_second)
            for k in SWEEP_KS:
                spec.setdefault(k, []).append(run_to_end(spec_run(settings, prompted, DraftConfig(k=k)))[1])
                rows = _sweep_rows(plain, spec)
                yield f"Repeat {r + 1} of {count}: k = {k} done.", *_sweep_view(rows)
    best = best_of({row["k"]: _spread(row) for row in rows})
    status = f"{best_k_line(best)}\n\n{_sweep_config(settings, count)}"
    yield status, *_sweep_view(rows)


def _sweep_rows(plain: list[float], spec: dict[int, list[Summary]]) -> list[dict]:
    baseline = Spread.of(plain).median
    rows = []
    for k, runs in spec.items():
        speedups = Spread.of([round(s.tokens_per_second / baseline, 3) if baseline else 0.0 for s in runs])
        rows.append(
            {
                "k": k,
                "speedup": speedups.median,
                "speedup_min": speedups.low,
                "speedup_max": speedups.high,
                "repeats": speedups.repeats,
                "acceptance_rate": None if runs[0].acceptance_rate is None else round(runs[0].acceptance_rate, 3),
                "mean_accepted_length": round(runs[0].mean_accepted_length, 2),
            }
        )
    return rows


def _spread(row: dict) -> Spread:
    return Spread(row["speedup"], row["speedup_min"], row["speedup_max"], row["repeats"])


def _sweep_view(rows: list[dict]) -> tuple:
    best = best_of({row["k"]: _spread(row) for row in rows})
    table = [
        [f"{row['speedup_min']:.2f}–{row['speedup_max']:.2f}" if c == "spread" else row[c] for c in SWEEP_COLUMNS]
        for row in rows
    ]
    return workload_charts.sweep_figure(rows, best), table


def _sweep_config(settings: RaceSettings, count: int) -> str:
    return (
        f"<p class='note'>Greedy, {settings.generation.max_new_tokens} new tokens, target "
        f"{html.escape(settings.target)}, drafter {html.escape(settings.drafter)}, {count} repeats (median and "
        f"min–max); CPU {html.escape(this_machine().kind)}; commit {running_commit()}.</p>"
    )
